#include "prism/runtime/processes.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "prism/core/error.h"

namespace prism {
namespace {

// Open MPI's C interface, as its libmpi.so.40 exports it: handles are pointers to the
// library's objects (MPI_COMM_WORLD is the address of ompi_mpi_comm_world), so nothing of
// mpi.h is needed to build. Only bytes cross: sums are prism's own, in a fixed order.
using Handle = void*;
constexpr int kSuccess = 0;
constexpr int kThreadSerialized = 2, kThreadMultiple = 3;
constexpr int kUndefined = -32766;  // MPI_UNDEFINED
constexpr int kMaxString = 1024;    // above MPI_MAX_ERROR_STRING and MPI_MAX_PROCESSOR_NAME

struct Mpi {
  void* library = nullptr;
  int (*Init_thread)(int*, char***, int, int*);
  int (*Finalize)();
  int (*Abort)(Handle, int);
  int (*Comm_rank)(Handle, int*);
  int (*Comm_size)(Handle, int*);
  int (*Comm_split)(Handle, int, int, Handle*);
  int (*Comm_free)(Handle*);
  int (*Comm_set_errhandler)(Handle, Handle);
  int (*Bcast)(void*, int, Handle, int, Handle);
  int (*Allgather)(const void*, int, Handle, void*, int, Handle, Handle);
  int (*Alltoallv)(const void*, const int*, const int*, Handle, void*, const int*, const int*,
                   Handle, Handle);
  int (*Comm_dup)(Handle, Handle*);
  int (*Isend)(const void*, int, Handle, int, int, Handle, Handle*);
  int (*Irecv)(void*, int, Handle, int, int, Handle, Handle*);
  int (*Test)(Handle*, int*, void*);
  int (*Cancel)(Handle*);
  int (*Error_string)(int, char*, int*);
  int (*Get_processor_name)(char*, int*);
  Handle comm_world, comm_null, byte, errors_return;
};

Mpi& mpi() {
  static Mpi m;
  return m;
}

void load_mpi() {
  Mpi& m = mpi();
  // RTLD_GLOBAL: Open MPI loads its components as plugins that look up the library's symbols.
  for (const char* name : {"libmpi.so.40", "libmpi.so"}) {
    m.library = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (m.library) break;
  }
  PRISM_CHECK(m.library,
              "processes: the environment says this run has {} processes, but Open MPI's "
              "library (libmpi.so.40) is not installed: {}",
              Processes::asked(), dlerror());
  auto symbol = [&](const char* name) {
    void* p = dlsym(m.library, name);
    PRISM_CHECK(p, "processes: Open MPI's library has no {}", name);
    return p;
  };
  auto fn = [&](auto& f, const char* name) {
    f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(symbol(name));
  };
  fn(m.Init_thread, "MPI_Init_thread");
  fn(m.Finalize, "MPI_Finalize");
  fn(m.Abort, "MPI_Abort");
  fn(m.Comm_rank, "MPI_Comm_rank");
  fn(m.Comm_size, "MPI_Comm_size");
  fn(m.Comm_split, "MPI_Comm_split");
  fn(m.Comm_free, "MPI_Comm_free");
  fn(m.Comm_set_errhandler, "MPI_Comm_set_errhandler");
  fn(m.Bcast, "MPI_Bcast");
  fn(m.Allgather, "MPI_Allgather");
  fn(m.Alltoallv, "MPI_Alltoallv");
  fn(m.Comm_dup, "MPI_Comm_dup");
  fn(m.Isend, "MPI_Isend");
  fn(m.Irecv, "MPI_Irecv");
  fn(m.Test, "MPI_Test");
  fn(m.Cancel, "MPI_Cancel");
  fn(m.Error_string, "MPI_Error_string");
  fn(m.Get_processor_name, "MPI_Get_processor_name");
  m.comm_world = symbol("ompi_mpi_comm_world");
  m.comm_null = symbol("ompi_mpi_comm_null");
  m.byte = symbol("ompi_mpi_byte");
  m.errors_return = symbol("ompi_mpi_errors_return");
}

void check(int code, const char* what) {
  if (code == kSuccess) return;
  char text[kMaxString] = {};
  int length = 0;
  if (mpi().Error_string(code, text, &length) != kSuccess) length = 0;
  fail("processes: {} failed: {}", what, std::string(text, std::min(length, kMaxString)));
}

int count_of(size_t bytes, const char* what) {
  PRISM_CHECK(bytes <= static_cast<size_t>(INT_MAX), "processes: {} of {} bytes at once", what,
              bytes);
  return static_cast<int>(bytes);
}

int env_size(const char* variable) {
  const char* v = std::getenv(variable);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  PRISM_CHECK(*end == '\0' && n >= 1 && n <= INT_MAX, "processes: {}={} is not a number", variable,
              v);
  return static_cast<int>(n);
}

std::mutex& made_mutex() {
  static std::mutex m;
  return m;
}
Processes*& made() {
  static Processes* p = nullptr;
  return p;
}

thread_local int commands_inside = 0;  // this thread's nested Leads
constexpr uint64_t kEnd = ~uint64_t{0};

// PRISM_PROCESS_TIMEOUT: seconds a process may go without answering (Processes::Watch).
double timeout_from_environment() {
  const char* v = std::getenv("PRISM_PROCESS_TIMEOUT");
  if (!v || !*v) return 30;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  PRISM_CHECK(*end == '\0' && s >= 0 && s <= 86400,
              "processes: PRISM_PROCESS_TIMEOUT={} is not a number of seconds from 0 (no watch) "
              "to 86400",
              v);
  return s;
}

// Calls `expired` on a thread of its own if it is still alive `timeout_s` seconds after it was
// made (never with 0).
class Deadline {
 public:
  Deadline(double timeout_s, std::function<void()> expired) {
    if (timeout_s <= 0) return;
    thread_ = std::thread([this, timeout_s, expired = std::move(expired)] {
      std::unique_lock lock(mutex_);
      if (!wake_.wait_for(lock, std::chrono::duration<double>(timeout_s), [this] { return done_; }))
        expired();
    });
  }
  ~Deadline() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

// A thread that keeps the processes of the run answering each other: rank 0 and each follower
// send each other a byte every interval on a communicator of their own, and a process that
// has heard nothing from the other for the timeout (stopped, its host hung or cut off) ends
// the run with one line naming it. Without it, every other process would wait for it in the
// next collective forever. A busy process still answers (the thread is not the one computing);
// only one that runs no code at all, or whose messages no longer arrive, falls silent.
class Processes::Watch {
 public:
  Watch(Processes& processes, Handle comm, double timeout_s, std::vector<std::string> hosts)
      : processes_(processes),
        comm_(comm),
        timeout_(std::chrono::duration<double>(timeout_s)),
        interval_(std::chrono::duration<double>(std::clamp(timeout_s / 8, 0.02, 1.0))),
        hosts_(std::move(hosts)) {
    const int me = processes_.rank();
    for (int r = 0; r < processes_.size(); ++r) {
      if (r != me && (me == 0 || r == 0)) peers_.push_back(Peer{r});
    }
    thread_ = std::thread([this] { run(); });
  }

  ~Watch() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    Mpi& m = mpi();
    // What is still posted: a receive is cancelled; a send of one byte completes without its
    // receiver (MPI sends so small a message eagerly). Neither may keep the run from ending.
    auto settle = [&m](Handle& request) {
      int done = 0;
      const auto deadline = Clock::now() + std::chrono::seconds(1);
      while (m.Test(&request, &done, nullptr) == kSuccess && !done && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    for (Peer& peer : peers_) {
      if (peer.receiving) {
        m.Cancel(&peer.receive);
        settle(peer.receive);
      }
      if (peer.sending) settle(peer.send);
    }
    m.Comm_free(&comm_);
  }

  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  struct Peer {
    int rank;
    Handle receive = nullptr, send = nullptr;
    bool receiving = false, sending = false;
    std::byte in{}, out{};
    Clock::time_point heard{}, sent{};
  };

  void run() {
    Mpi& m = mpi();
    const auto start = Clock::now();
    for (Peer& peer : peers_) peer.heard = start;
    std::unique_lock lock(mutex_);
    while (!stop_) {
      const auto now = Clock::now();
      for (Peer& peer : peers_) {
        int done = 0;
        if (peer.receiving && m.Test(&peer.receive, &done, nullptr) == kSuccess && done) {
          peer.receiving = false;
          peer.heard = now;
        }
        if (!peer.receiving) {
          peer.receiving =
              m.Irecv(&peer.in, 1, m.byte, peer.rank, 0, comm_, &peer.receive) == kSuccess;
        }
        if (peer.sending && m.Test(&peer.send, &done, nullptr) == kSuccess && done) {
          peer.sending = false;
        }
        if (!peer.sending && now - peer.sent >= interval_) {
          peer.sending = m.Isend(&peer.out, 1, m.byte, peer.rank, 0, comm_, &peer.send) == kSuccess;
          peer.sent = now;
        }
        if (now - peer.heard > timeout_) silent(peer, now);
      }
      wake_.wait_for(
          lock, std::min<Clock::duration>(std::chrono::duration_cast<Clock::duration>(interval_),
                                          std::chrono::milliseconds(50)));
    }
  }

  [[noreturn]] void silent(const Peer& peer, Clock::time_point now) {
    const double seconds = std::chrono::duration<double>(now - peer.heard).count();
    std::fflush(stdout);
    std::fprintf(stderr,
                 "prism: error: rank %d on %s has not answered %s for %.0f s (stopped, or its "
                 "host hung or cut off; PRISM_PROCESS_TIMEOUT): ending the run\n",
                 peer.rank, hosts_[static_cast<size_t>(peer.rank)].c_str(),
                 processes_.name().c_str(), seconds);
    std::fflush(stderr);
    mpi().Abort(mpi().comm_world, 1);  // does not return
    std::_Exit(1);
  }

  Processes& processes_;
  Handle comm_;
  const std::chrono::duration<double> timeout_, interval_;
  const std::vector<std::string> hosts_;
  std::vector<Peer> peers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

int Processes::asked() {
  if (int n = env_size("OMPI_COMM_WORLD_SIZE")) return n;  // Open MPI's mpirun
  if (int n = env_size("PMI_SIZE")) return n;              // a PMI-1/2 launcher
  if (std::getenv("PMIX_RANK")) {                          // srun --mpi=pmix
    if (int n = env_size("SLURM_STEP_NUM_TASKS")) return n;
  }
  return 1;
}

Processes* Processes::get() {
  std::lock_guard lock(made_mutex());
  if (made()) return made();
  static std::string failed;  // MPI initializes once: a failure stays
  if (!failed.empty()) throw Error(failed);
  if (asked() <= 1) return nullptr;
  try {
    made() = new Processes();  // lives for the process: finish() leaves MPI
  } catch (const Error& e) {
    failed = e.what();
    throw;
  }
  return made();
}

Processes* Processes::running() {
  std::lock_guard lock(made_mutex());
  return made();
}

Processes::Processes() {
  load_mpi();
  Mpi& m = mpi();
  int provided = 0;
  check(m.Init_thread(nullptr, nullptr, kThreadMultiple, &provided), "MPI_Init_thread");
  // Errors come back as codes (and become prism::Errors) rather than ending the process.
  check(m.Comm_set_errhandler(m.comm_world, m.errors_return), "MPI_Comm_set_errhandler");
  PRISM_CHECK(provided >= kThreadSerialized,
              "processes: Open MPI gives thread level {}, prism needs at least serialized calls "
              "from several threads",
              provided);
  if (provided >= kThreadMultiple) thread_level_ = ThreadLevel::multiple;
  world_.reset(new ProcessGroup(m.comm_world, false));
  rank_ = world_->rank();
  size_ = world_->size();
  char host[kMaxString] = {};
  int length = 0;
  check(m.Get_processor_name(host, &length), "MPI_Get_processor_name");
  host_.assign(host, std::min(length, kMaxString));

  // The watch: rank 0's timeout for every process (a follower's own setting would make the
  // two ends disagree), and every process's host for the line that names one.
  timeout_s_ = timeout_from_environment();
  world_->broadcast(&timeout_s_, sizeof timeout_s_, 0);
  std::vector<char> hosts(static_cast<size_t>(size_) * kMaxString);
  world_->all_gather(host, kMaxString, hosts.data());
  for (int r = 0; r < size_; ++r) {
    const char* name = hosts.data() + static_cast<size_t>(r) * kMaxString;
    hosts_.emplace_back(name, strnlen(name, kMaxString - 1));
    if (r < rank_ && hosts_.back() == host_) ++local_rank_;
  }
  if (timeout_s_ > 0 && thread_level_ == ThreadLevel::multiple) {
    Handle comm = nullptr;
    check(m.Comm_dup(m.comm_world, &comm), "MPI_Comm_dup");
    watch_ = std::make_unique<Watch>(*this, comm, timeout_s_, hosts_);
  }
}

Processes::~Processes() = default;

std::string Processes::name() const { return fmt::format("rank {} on {}", rank_, host_); }

std::unique_ptr<ProcessGroup> Processes::split(int color, int key) {
  Handle comm = nullptr;
  check(mpi().Comm_split(mpi().comm_world, color < 0 ? kUndefined : color, key, &comm),
        "MPI_Comm_split");
  if (comm == mpi().comm_null) return nullptr;
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(comm, true));
}

Processes::Lead::Lead(Lead&& other) noexcept
    : processes_(other.processes_), exceptions_(other.exceptions_) {
  other.processes_ = nullptr;
}

Processes::Lead::~Lead() {
  if (!processes_) return;
  // An error leaving a command: the followers may be inside it, waiting for this process.
  if (std::uncaught_exceptions() > exceptions_) processes_->failed_in_command_ = true;
  --commands_inside;
  processes_->commands_.unlock();
}

Processes::Lead Processes::lead(std::span<const std::byte> command) {
  Lead lead;
  if (rank_ != 0) return lead;
  commands_.lock();
  lead.processes_ = this;
  lead.exceptions_ = std::uncaught_exceptions();
  if (commands_inside++ == 0) {
    uint64_t bytes = command.size();
    world_->broadcast(&bytes, sizeof bytes, 0);
    world_->broadcast(const_cast<std::byte*>(command.data()), command.size(), 0);
  }
  return lead;
}

void Processes::follow(const std::function<void(std::span<const std::byte>)>& handle) {
  PRISM_CHECK(rank_ != 0, "processes: rank 0 leads, it does not follow");
  std::vector<std::byte> command;
  for (;;) {
    uint64_t bytes = 0;
    world_->broadcast(&bytes, sizeof bytes, 0);
    if (bytes == kEnd) {
      ended_ = true;
      return;
    }
    command.resize(bytes);
    world_->broadcast(command.data(), bytes, 0);
    handle(command);
  }
}

int Processes::finish(int code) {
  if (finished_) return code;
  finished_ = true;
  Mpi& m = mpi();
  if (code != 0 && (rank_ != 0 || failed_in_command_)) {
    std::fflush(stdout);
    std::fflush(stderr);
    // Most errors are every process's (the same arguments, the same files): a moment for rank
    // 0 to say it first, before the abort stops it.
    if (rank_ != 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    m.Abort(m.comm_world, code);  // does not return
    std::_Exit(code);
  }
  // Rank 0's end of the commands: a follower in follow() took it there, the others take it
  // here.
  try {
    if (rank_ == 0 || !ended_) {
      uint64_t end = kEnd;
      world_->broadcast(&end, sizeof end, 0);
      PRISM_CHECK(end == kEnd, "processes: rank 0 sent commands this process did not follow");
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "prism: error: %s: %s\n", name().c_str(), e.what());
    m.Abort(m.comm_world, code ? code : 1);
  }
  watch_.reset();
  world_.reset();
  // MPI_Finalize waits for every process of the run, and the watch is gone by then: a process
  // that stopped, or whose host hung or was cut off, after the last command would keep this
  // one there for ever.
  const Deadline deadline(timeout_s_, [this, code] {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "prism: error: %s waited %.0f s for the other processes to end the run (one "
                 "stopped, or its host hung or cut off; PRISM_PROCESS_TIMEOUT): leaving without "
                 "them\n",
                 name().c_str(), timeout_s_);
    std::fflush(stderr);
    std::_Exit(code ? code : 1);
  });
  m.Finalize();
  return code;
}

ProcessGroup::ProcessGroup(void* comm, bool owned) : comm_(comm), owned_(owned) {
  check(mpi().Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(mpi().Comm_size(comm_, &size_), "MPI_Comm_size");
}

ProcessGroup::~ProcessGroup() {
  if (owned_) mpi().Comm_free(&comm_);
}

void ProcessGroup::broadcast(void* data, size_t bytes, int root) {
  if (bytes == 0) return;
  check(mpi().Bcast(data, count_of(bytes, "a broadcast"), mpi().byte, root, comm_), "MPI_Bcast");
}

void ProcessGroup::all_gather(const void* in, size_t bytes, void* out) {
  const int n = count_of(bytes, "an all-gather");
  check(mpi().Allgather(in, n, mpi().byte, out, n, mpi().byte, comm_), "MPI_Allgather");
}

void ProcessGroup::all_to_all(const std::byte* send, std::span<const size_t> send_bytes,
                              std::span<const size_t> send_at, std::byte* recv,
                              std::span<const size_t> recv_bytes, std::span<const size_t> recv_at) {
  const size_t n = static_cast<size_t>(size_);
  PRISM_CHECK(send_bytes.size() == n && send_at.size() == n && recv_bytes.size() == n &&
                  recv_at.size() == n,
              "processes: an all-to-all over {} processes with {} parts", n, send_bytes.size());
  std::vector<int> counts[4];
  for (size_t q = 0; q < n; ++q) {
    counts[0].push_back(count_of(send_bytes[q], "an all-to-all"));
    counts[1].push_back(count_of(send_at[q], "an all-to-all"));
    counts[2].push_back(count_of(recv_bytes[q], "an all-to-all"));
    counts[3].push_back(count_of(recv_at[q], "an all-to-all"));
  }
  check(mpi().Alltoallv(send, counts[0].data(), counts[1].data(), mpi().byte, recv,
                        counts[2].data(), counts[3].data(), mpi().byte, comm_),
        "MPI_Alltoallv");
}

}  // namespace prism
