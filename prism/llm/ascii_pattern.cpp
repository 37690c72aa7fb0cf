#include "prism/llm/ascii_pattern.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <string>

#include "prism/core/error.h"

namespace prism::llm {

namespace {

using Set = std::bitset<128>;

// The characters a string held to a pattern is written in.
Set writable() {
  Set s;
  for (int c = 0x20; c < 0x7F; ++c) s.set(static_cast<size_t>(c));
  s.reset('"');
  s.reset('\\');
  return s;
}

Set range(int lo, int hi) {
  Set s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
  return s;
}

// The character of a set of one.
int only(const Set& s) {
  for (size_t c = 0; c < s.size(); ++c) {
    if (s.test(c)) return static_cast<int>(c);
  }
  return -1;
}

// A parsed expression.
struct Re {
  enum class Kind { set, cat, alt, repeat } kind = Kind::cat;
  Set set;
  std::vector<Re> kids;
  int min = 0, max = 0;  // repeat: max < 0 for no bound
};

constexpr int kMaxRepeat = 1000;

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  // The top-level alternatives, each with its anchors.
  struct Alternative {
    Re re;
    bool head = false, tail = false;  // ^ at its start, $ at its end
  };
  std::vector<Alternative> top() {
    std::vector<Alternative> out;
    for (;;) {
      Alternative a;
      a.head = eat('^');
      a.re = concat(true);
      a.tail = eat('$');
      out.push_back(std::move(a));
      if (at_end()) return out;
      if (!eat('|')) bad("an anchor or ')' inside the pattern is not supported");
    }
  }

 private:
  [[noreturn]] void bad(std::string_view what) const {
    fail("pattern /{}/: {} (at offset {})", p_, what, i_);
  }
  bool at_end() const { return i_ == p_.size(); }
  char peek() const { return at_end() ? '\0' : p_[i_]; }
  bool eat(char c) {
    if (at_end() || p_[i_] != c) return false;
    ++i_;
    return true;
  }

  Re alternation() {
    Re alt{Re::Kind::alt};
    alt.kids.push_back(concat(false));
    while (eat('|')) alt.kids.push_back(concat(false));
    return alt.kids.size() == 1 ? std::move(alt.kids[0]) : alt;
  }

  // Pieces up to '|', ')' or the end (top level: also a final '$').
  Re concat(bool top) {
    Re cat{Re::Kind::cat};
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (top && peek() == '$' && (i_ + 1 == p_.size() || p_[i_ + 1] == '|')) break;
      if (peek() == '^' || peek() == '$') bad("an anchor inside the pattern is not supported");
      Re atom = this->atom();
      cat.kids.push_back(quantified(std::move(atom)));
    }
    if (top && peek() == ')') bad("')' without '('");
    return cat;
  }

  Re quantified(Re atom) {
    for (;;) {
      int min = 0, max = 0;
      if (eat('*')) {
        min = 0, max = -1;
      } else if (eat('+')) {
        min = 1, max = -1;
      } else if (eat('?')) {
        min = 0, max = 1;
      } else if (!braces(min, max)) {
        return atom;
      }
      eat('?');  // lazy: the same strings
      Re r{Re::Kind::repeat};
      r.min = min;
      r.max = max;
      r.kids.push_back(std::move(atom));
      atom = std::move(r);
    }
  }

  // {n}, {n,} or {n,m}; false (nothing read) for a brace that is not one (a literal '{').
  bool braces(int& min, int& max) {
    if (peek() != '{') return false;
    size_t j = i_ + 1;
    auto number = [&](int& v) {
      const size_t from = j;
      v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        v = std::min(v * 10 + (p_[j] - '0'), kMaxRepeat + 1);
        ++j;
      }
      return j > from;
    };
    if (!number(min)) return false;
    max = min;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(max)) max = -1;
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    i_ = j + 1;
    if (min > kMaxRepeat || max > kMaxRepeat) bad("a count of more than 1000");
    if (max >= 0 && max < min) bad("a count {n,m} with m < n");
    return true;
  }

  Re set(Set s) {
    Re r{Re::Kind::set};
    r.set = s;
    return r;
  }

  Re atom() {
    const char c = p_[i_++];
    switch (c) {
      case '(': {
        if (eat('?')) {
          if (eat(':')) {
          } else if (peek() == '<' && i_ + 1 < p_.size() && p_[i_ + 1] != '=' &&
                     p_[i_ + 1] != '!') {
            while (!at_end() && peek() != '>') ++i_;  // a named group: as any other
            if (!eat('>')) bad("an unfinished group name");
          } else {
            bad("lookaround is not supported");
          }
        }
        Re inner = alternation();
        if (!eat(')')) bad("'(' without ')'");
        return inner;
      }
      case '[':
        return set(klass());
      case '.':
        return set(range(0, 127) & ~range('\n', '\n') & ~range('\r', '\r'));
      case '\\':
        return set(escape(false));
      case '*':
      case '+':
      case '?':
        bad("nothing to repeat");
      default:
        if (static_cast<unsigned char>(c) >= 0x80) return set(Set());  // never written here
        return set(range(c, c));
    }
  }

  // A class's body, after its '['.
  Set klass() {
    const bool negated = eat('^');
    Set s;
    for (;;) {
      if (at_end()) bad("'[' without ']'");
      if (eat(']')) break;
      int lo = -1;
      Set item;
      const char c = p_[i_++];
      if (c == '\\') {
        item = escape(true);
        if (item.count() == 1) lo = only(item);
      } else if (static_cast<unsigned char>(c) < 0x80) {
        lo = static_cast<unsigned char>(c);
        item.set(static_cast<size_t>(lo));
      }
      // A range: a single character, '-', a single character.
      if (lo >= 0 && peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        const char d = p_[i_++];
        int hi = -1;
        if (d == '\\') {
          const Set e = escape(true);
          if (e.count() != 1) bad("a range that ends in a class");
          hi = only(e);
        } else {
          hi = static_cast<unsigned char>(d) < 0x80 ? static_cast<unsigned char>(d) : 127;
        }
        if (hi < lo) bad("a range out of order");
        item = range(lo, hi);
      }
      s |= item;
    }
    return negated ? ~s : s;
  }

  // After a backslash: the characters it stands for (in a class, \b is a backspace).
  Set escape(bool in_class) {
    if (at_end()) bad("a pattern that ends in '\\'");
    const char c = p_[i_++];
    const Set digits = range('0', '9');
    const Set word = range('a', 'z') | range('A', 'Z') | digits | range('_', '_');
    const Set space = range('\t', '\r') | range(' ', ' ');
    auto hex = [&] {
      const char h = peek();
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) bad("a bad hex escape");
      ++i_;
      return d;
    };
    // A code point (a non-ASCII one is never written here: no character).
    auto code = [&](int digits_count) {
      int v = 0;
      for (int k = 0; k < digits_count; ++k) v = std::min(v * 16 + hex(), 0x110000);
      return v < 128 ? range(v, v) : Set();
    };
    switch (c) {
      case 'd':
        return digits;
      case 'D':
        return ~digits;
      case 'w':
        return word;
      case 'W':
        return ~word;
      case 's':
        return space;
      case 'S':
        return ~space;
      case 't':
        return range('\t', '\t');
      case 'n':
        return range('\n', '\n');
      case 'r':
        return range('\r', '\r');
      case 'f':
        return range('\f', '\f');
      case 'v':
        return range('\v', '\v');
      case '0':
        return range(0, 0);
      case 'x':
        return code(2);
      case 'u':
        if (eat('{')) {
          int v = 0;
          while (!at_end() && peek() != '}') v = std::min(v * 16 + hex(), 0x110000);
          if (!eat('}')) bad("a bad \\u{...} escape");
          return v < 128 ? range(v, v) : Set();
        }
        return code(4);
      case 'b':
        if (in_class) return range('\b', '\b');
        bad("\\b is not supported");
      case 'B':
        bad("\\B is not supported");
      case 'p':
      case 'P':
        bad("Unicode properties are not supported");
      case 'k':
        bad("back references are not supported");
      default:
        if (c >= '1' && c <= '9') bad("back references are not supported");
        if (static_cast<unsigned char>(c) >= 0x80) return Set();
        return range(c, c);  // an escaped character stands for itself
    }
  }

  std::string_view p_;
  size_t i_ = 0;
};

}  // namespace

// Thompson's construction, then the DFA of its subsets over the writable characters.
class PatternCompiler {
 public:
  explicit PatternCompiler(std::string_view pattern) : pattern_(pattern) {}

  std::shared_ptr<const AsciiPattern> build(const std::vector<Parser::Alternative>& alts) {
    const Set w = writable();
    accept_ = add();
    const int loose_tail = add();  // after a match without '$': anything
    nfa_[loose_tail].set = w;
    nfa_[loose_tail].to = loose_tail;
    nfa_[loose_tail].eps.push_back(accept_);
    const int start = add();
    for (const Parser::Alternative& a : alts) {
      int s = compile(a.re, a.tail ? accept_ : loose_tail);
      if (!a.head) {  // before a match without '^': anything
        const int loose_head = add();
        nfa_[loose_head].set = w;
        nfa_[loose_head].to = loose_head;
        nfa_[loose_head].eps.push_back(s);
        s = loose_head;
      }
      nfa_[start].eps.push_back(s);
    }
    return dfa(start, w);
  }

 private:
  struct State {
    Set set;
    int to = -1;
    std::vector<int> eps;
  };

  [[noreturn]] void bad(std::string_view what) const { fail("pattern /{}/: {}", pattern_, what); }

  int add() {
    if (nfa_.size() >= AsciiPattern::kMaxNfaStates) bad("too large");
    nfa_.push_back({});
    return static_cast<int>(nfa_.size() - 1);
  }

  int either(int a, int b) {
    const int s = add();
    nfa_[s].eps = {a, b};
    return s;
  }

  // The start of `re`'s states, which go on to `out` once it has matched.
  int compile(const Re& re, int out) {
    switch (re.kind) {
      case Re::Kind::set: {
        const int s = add();
        nfa_[s].set = re.set;
        nfa_[s].to = out;
        return s;
      }
      case Re::Kind::cat:
        for (size_t k = re.kids.size(); k-- > 0;) out = compile(re.kids[k], out);
        return out;
      case Re::Kind::alt: {
        const int s = add();
        for (const Re& kid : re.kids) {
          const int k = compile(kid, out);
          nfa_[s].eps.push_back(k);
        }
        return s;
      }
      case Re::Kind::repeat: {
        int cur = out;
        if (re.max < 0) {  // a loop: the kid again, or on
          const int loop = add();
          const int body = compile(re.kids[0], loop);
          nfa_[loop].eps = {body, out};
          cur = loop;
        } else {
          for (int k = 0; k < re.max - re.min; ++k) cur = either(compile(re.kids[0], cur), out);
        }
        for (int k = 0; k < re.min; ++k) cur = compile(re.kids[0], cur);
        return cur;
      }
    }
    return out;
  }

  std::vector<int> closure(std::vector<int> states) const {
    std::vector<uint8_t> seen(nfa_.size(), 0);
    std::vector<int> todo = states, out;
    while (!todo.empty()) {
      const int s = todo.back();
      todo.pop_back();
      if (seen[static_cast<size_t>(s)]) continue;
      seen[static_cast<size_t>(s)] = 1;
      out.push_back(s);
      for (const int e : nfa_[static_cast<size_t>(s)].eps) todo.push_back(e);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::shared_ptr<const AsciiPattern> dfa(int start, const Set& w) {
    auto p = std::shared_ptr<AsciiPattern>(new AsciiPattern());
    std::map<std::vector<int>, int32_t> ids;
    std::vector<std::vector<int>> sets;
    auto id_of = [&](std::vector<int> set) {
      const auto [it, fresh] = ids.emplace(set, static_cast<int32_t>(sets.size()));
      if (fresh) {
        if (sets.size() >= AsciiPattern::kMaxStates) bad("too large");
        sets.push_back(std::move(set));
      }
      return it->second;
    };
    id_of(closure({start}));
    for (size_t d = 0; d < sets.size(); ++d) {
      std::array<int32_t, 128> row;
      row.fill(AsciiPattern::kRefused);
      for (size_t c = 0; c < 128; ++c) {
        if (!w.test(c)) continue;
        std::vector<int> moved;
        for (const int s : sets[d]) {
          const State& st = nfa_[static_cast<size_t>(s)];
          if (st.to >= 0 && st.set.test(c)) moved.push_back(st.to);
        }
        if (!moved.empty()) row[c] = id_of(closure(std::move(moved)));
      }
      p->table_.push_back(row);
      p->accepting_.push_back(std::binary_search(sets[d].begin(), sets[d].end(), accept_));
    }
    // States with no way to a match are never entered.
    const size_t n = p->table_.size();
    std::vector<uint8_t> live(p->accepting_.begin(), p->accepting_.end());
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t d = 0; d < n; ++d) {
        if (live[d]) continue;
        for (const int32_t to : p->table_[d]) {
          if (to >= 0 && live[static_cast<size_t>(to)]) {
            live[d] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    if (!live[0]) {
      bad("no string of printable ASCII without quotes or backslashes matches it");
    }
    for (auto& row : p->table_) {
      for (int32_t& to : row) {
        if (to >= 0 && !live[static_cast<size_t>(to)]) to = AsciiPattern::kRefused;
      }
    }
    return p;
  }

  std::string_view pattern_;
  std::vector<State> nfa_;
  int accept_ = 0;
};

AsciiPattern::Lengths AsciiPattern::lengths(size_t limit) const {
  const size_t n = table_.size();
  PRISM_CHECK(n * (limit + 1) <= (size_t{1} << 22),
              "pattern: its DFA's {} states and lengths up to {} are too many to follow", n, limit);
  Lengths out;
  out.limit = limit;
  out.words = (limit + 1 + 63) / 64;
  out.bits.assign(n * out.words, 0);
  // Each state's distinct next states.
  std::vector<std::vector<uint32_t>> next(n);
  for (size_t q = 0; q < n; ++q) {
    for (const int32_t t : table_[q]) {
      if (t >= 0) next[q].push_back(static_cast<uint32_t>(t));
    }
    std::sort(next[q].begin(), next[q].end());
    next[q].erase(std::unique(next[q].begin(), next[q].end()), next[q].end());
  }
  auto bit = [&](size_t q, size_t l) { return out.bits[q * out.words + l / 64] >> (l % 64) & 1; };
  for (size_t q = 0; q < n; ++q) out.bits[q * out.words] |= accepting_[q];
  for (size_t l = 1; l <= limit; ++l) {
    for (size_t q = 0; q < n; ++q) {
      for (const uint32_t t : next[q]) {
        if (bit(t, l - 1)) {
          out.bits[q * out.words + l / 64] |= uint64_t{1} << (l % 64);
          break;
        }
      }
    }
  }
  return out;
}

bool AsciiPattern::Lengths::any(uint32_t state, size_t low, size_t high) const {
  high = std::min(high, limit);
  for (size_t l = low; l <= high; ++l) {
    if (bits[state * words + l / 64] >> (l % 64) & 1) return true;
  }
  return false;
}

std::shared_ptr<const AsciiPattern> AsciiPattern::compile(std::string_view pattern) {
  Parser parser(pattern);
  return PatternCompiler(pattern).build(parser.top());
}

}  // namespace prism::llm
