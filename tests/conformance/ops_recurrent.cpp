// Recurrent layers (RNN, GRU, LSTM), unrolled over the sequence: the input projection of all
// steps is one dot, each step adds the recurrent projection and applies the gates. Forward
// direction, default activations; sequence_lens freezes the state of finished sequences.
#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

enum class Cell { rnn, gru, lstm };

struct Recurrence {
  Cell cell;
  int gates;  // weight blocks stacked in W and R: 1, 3 (z r h) or 4 (i o f c)
  int64_t hidden, batch, steps;
};

// Gate g of a {..., "gh"} tensor whose "gh" stacks the gates, as {..., "h"}.
Tensor gate(const Tensor& stacked, int g, int64_t hidden) {
  return stacked.slice("gh", g * hidden, hidden).rename({{"gh", "h"}});
}

// The state input i ([dirs, batch, hidden], or [batch, dirs, hidden] with layout 1) as
// {b, h}, or zeros.
Tensor initial_state(const NodeContext& ctx, int i, const Recurrence& r, DType dtype) {
  if (!ctx.has_input(i)) return Tensor::zeros(Shape(dtype, {{"b", r.batch}, {"h", r.hidden}}));
  return with_tags(reshape_to(ctx.input(i), {r.batch, r.hidden}), {"b", "h"});
}

std::vector<Tensor> recurrent(const NodeContext& ctx, Cell cell) {
  ctx.expect_attributes({"hidden_size", "layout", "direction", "linear_before_reset"});
  if (ctx.attr_string("direction", "forward") != "forward") {
    unsupported("{}: direction \"{}\"", ctx.op(), ctx.attr_string("direction"));
  }
  bool batch_first = ctx.attr_int("layout", 0) == 1;
  Recurrence r{cell,
               cell == Cell::rnn   ? 1
               : cell == Cell::gru ? 3
                                   : 4,
               ctx.attr_int("hidden_size", 0), 0, 0};
  std::vector<int64_t> xd = ctx.dims(0);
  r.steps = batch_first ? xd[1] : xd[0];
  r.batch = batch_first ? xd[0] : xd[1];
  int64_t h = r.hidden, gh = r.gates * h;
  Tensor x = with_tags(ctx.input(0), batch_first ? std::vector<Tag>{"b", "s", "i"}
                                                 : std::vector<Tag>{"s", "b", "i"});
  DType dtype = x.dtype();
  Tensor w = with_tags(reshape_to(ctx.input(1), {gh, xd[2]}), {"gh", "i"});
  Tensor rw = with_tags(reshape_to(ctx.input(2), {gh, h}), {"gh", "hp"});
  // Input projections of every step at once, with both biases: {s, b, gh}.
  Tensor projected = x.dot(w, "i").transpose({"s", "b", "gh"});
  Tensor recurrent_bias;  // Rb alone matters separately for GRU's linear_before_reset
  if (ctx.has_input(3)) {
    Tensor bias = with_tags(reshape_to(ctx.input(3), {2, gh}), {"wr", "gh"});
    projected = projected + bias.slice("wr", 0, 1).reshape(Shape(dtype, {{"gh", gh}}));
    recurrent_bias = bias.slice("wr", 1, 1).reshape(Shape(dtype, {{"gh", gh}}));
  } else {
    recurrent_bias = Tensor::zeros(Shape(dtype, {{"gh", gh}}));
  }
  std::optional<Tensor> lengths;
  if (ctx.has_input(4)) lengths = with_tags(ctx.input(4).convert(DType::i64), {"b"});
  int state_input = 5;
  Tensor state = initial_state(ctx, state_input, r, dtype);
  Tensor cell_state = cell == Cell::lstm ? initial_state(ctx, 6, r, dtype) : Tensor();
  std::optional<Tensor> peephole;
  if (cell == Cell::lstm && ctx.has_input(7)) {
    peephole = with_tags(reshape_to(ctx.input(7), {3 * h}), {"gh"});
  }
  bool linear_before_reset = ctx.attr_int("linear_before_reset", 0) != 0;

  std::vector<Tensor> outputs;
  for (int64_t t = 0; t < r.steps; ++t) {
    Tensor xt = projected.slice("s", t, 1).reshape(Shape(dtype, {{"b", r.batch}, {"gh", gh}}));
    Tensor hp = state.rename({{"h", "hp"}});
    Tensor rec = hp.dot(rw, "hp");  // {b, gh}
    Tensor next, next_cell;
    if (cell == Cell::rnn) {
      next = gate(xt + rec + recurrent_bias, 0, h).tanh();
    } else if (cell == Cell::gru) {
      Tensor both = xt + rec + recurrent_bias;
      Tensor z = gate(both, 0, h).logistic(), reset = gate(both, 1, h).logistic();
      Tensor candidate;
      if (linear_before_reset) {
        candidate = gate(xt, 2, h) + reset * gate(rec + recurrent_bias, 2, h);
      } else {
        Tensor rw_h = gate(rw, 2, h).rename({{"h", "ho"}});
        Tensor reset_state = (reset * state).rename({{"h", "hp"}}).dot(rw_h, "hp");
        candidate = gate(xt, 2, h) + reset_state.rename({{"ho", "h"}}) + gate(recurrent_bias, 2, h);
      }
      candidate = candidate.tanh();
      next = (1.0 - z) * candidate + z * state;
    } else {
      Tensor both = xt + rec + recurrent_bias;
      Tensor pi, po, pf;
      if (peephole) {
        pi = gate(*peephole, 0, h), po = gate(*peephole, 1, h), pf = gate(*peephole, 2, h);
      }
      Tensor i_pre = gate(both, 0, h), f_pre = gate(both, 2, h), o_pre = gate(both, 1, h);
      if (peephole) {
        i_pre = i_pre + pi * cell_state;
        f_pre = f_pre + pf * cell_state;
      }
      Tensor c = gate(both, 3, h).tanh();
      next_cell = f_pre.logistic() * cell_state + i_pre.logistic() * c;
      if (peephole) o_pre = o_pre + po * next_cell;
      next = o_pre.logistic() * next_cell.tanh();
    }
    next = next.transpose({"b", "h"});
    Tensor y = next;
    if (lengths) {
      Tensor running = lt(Tensor::scalar(double(t), DType::i64), *lengths);
      y = select(running, next, Tensor::scalar(0, dtype)).transpose({"b", "h"});
      next = select(running, next, state).transpose({"b", "h"});
      if (cell == Cell::lstm) next_cell = select(running, next_cell, cell_state);
    }
    state = next;
    if (cell == Cell::lstm) cell_state = next_cell.transpose({"b", "h"});
    outputs.push_back(y.insert("s", 1, 0));
  }
  // Y: [s, dirs, b, h] (layout 1: [b, s, dirs, h]); Y_h, Y_c: [dirs, b, h] ([b, dirs, h]).
  Tensor y = concat(outputs, "s");
  auto final_state = [&](const Tensor& s) {
    return batch_first ? reshape_to(s, {r.batch, 1, h}) : reshape_to(s, {1, r.batch, h});
  };
  Tensor y_out = batch_first ? reshape_to(y.transpose({"b", "s", "h"}), {r.batch, r.steps, 1, h})
                             : reshape_to(y.transpose({"s", "b", "h"}), {r.steps, 1, r.batch, h});
  std::vector<Tensor> result{y_out, final_state(state)};
  if (cell == Cell::lstm) result.push_back(final_state(cell_state));
  return result;
}

}  // namespace

void register_recurrent_ops(OpTable& t) {
  t["RNN"] = [](const NodeContext& ctx) { return recurrent(ctx, Cell::rnn); };
  t["GRU"] = [](const NodeContext& ctx) { return recurrent(ctx, Cell::gru); };
  t["LSTM"] = [](const NodeContext& ctx) { return recurrent(ctx, Cell::lstm); };
}

}  // namespace prism::conformance
