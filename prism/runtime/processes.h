// The processes of one run (docs/cluster.md): copies of one command started together by
// `mpirun` (Open MPI) or by a scheduler that sets MPI's rank and size environment, on one
// host or several. Each holds some of a mesh's devices; the devices' collectives cross
// processes through MPI (ProcessCommunicator, collectives.h), and rank 0 leads: it runs the
// user interface and tells the others (the followers) each step to take (lead() and
// follow()), so that every process runs the same programs in the same order.
//
// Open MPI's library is loaded with dlopen when the environment says the run has several
// processes, and only then: a run of one process never touches it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace prism {

class ProcessGroup;

class Processes {
 public:
  // The run's processes where the environment says there are several (mpirun's
  // OMPI_COMM_WORLD_SIZE, a PMI's PMI_SIZE, Slurm's srun with PMIx), null for a run of one.
  // The first call loads Open MPI and initializes it; throws, saying what is missing, when
  // it cannot.
  static Processes* get();
  // The processes if get() has made them, else null (nothing is initialized).
  static Processes* running();
  // How many processes the environment says the run has (1 where it says nothing), without
  // initializing anything. Throws on a size that is not a positive number.
  static int asked();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& host() const { return host_; }
  // Process r's host, and this process's place among those of its host (0 for the lowest
  // rank there).
  const std::string& host_of(int r) const { return hosts_.at(static_cast<size_t>(r)); }
  int local_rank() const { return local_rank_; }
  // "rank 1 on host-b": how messages name this process.
  std::string name() const;

  // Every process of the run.
  ProcessGroup& world() { return *world_; }
  // Collective over the world: the processes that give the same `color` form a group, ranked
  // by `key`; a negative color joins none (null).
  std::unique_ptr<ProcessGroup> split(int color, int key);
  // Which calls from several threads MPI allows (MPI_Init_thread's answer).
  enum class ThreadLevel { serialized, multiple };
  ThreadLevel thread_level() const { return thread_level_; }

  // Rank 0's commands to the followers (the bytes mean what the caller makes them mean). On
  // rank 0, lead() sends `command` to every other process, unless this thread is already
  // inside a command (commands nest: only the outermost is sent), and the Lead it returns
  // keeps other threads' commands waiting until it goes: every process then runs the same
  // commands in the same order. Elsewhere it does nothing.
  class Lead {
   public:
    Lead() = default;
    Lead(Lead&& other) noexcept;
    Lead& operator=(Lead&&) = delete;
    ~Lead();

   private:
    friend class Processes;
    Processes* processes_ = nullptr;
    int exceptions_ = 0;
  };
  [[nodiscard]] Lead lead(std::span<const std::byte> command);
  // On a follower: runs `handle` on each of rank 0's commands in turn until rank 0 ends the
  // run (finish()). An error of `handle` ends follow() with it (the command ran on rank 0:
  // this process cannot go on in step with the others).
  void follow(const std::function<void(std::span<const std::byte>)>& handle);
  // Ends the run in this process with exit code `code`, and returns it: rank 0 tells the
  // followers to stop following, then every process stops its watch and leaves MPI (a process
  // that waits there longer than the watch's timeout for the others exits with an error line
  // and code 1, or `code`). A follower that ends with an error, or rank 0 after an error inside
  // a command (others may be waiting for it in a collective), aborts the run instead: mpirun
  // then stops every process.
  int finish(int code);

  Processes(const Processes&) = delete;
  Processes& operator=(const Processes&) = delete;
  ~Processes();

 private:
  class Watch;
  Processes();
  int rank_ = 0, size_ = 1;
  ThreadLevel thread_level_ = ThreadLevel::serialized;
  std::string host_;
  std::vector<std::string> hosts_;  // per rank
  int local_rank_ = 0;
  std::unique_ptr<ProcessGroup> world_;
  // Rank 0 and each follower hear from each other every so often, or one ends the run naming
  // the other (PRISM_PROCESS_TIMEOUT, 30 s by default; 0 turns it off). Needs MPI's multiple
  // thread level; null without it.
  std::unique_ptr<Watch> watch_;
  double timeout_s_ = 0;  // rank 0's PRISM_PROCESS_TIMEOUT: the watch's, finish()'s wait
  std::recursive_mutex commands_;
  bool failed_in_command_ = false;
  bool ended_ = false;  // a follower took rank 0's end in follow()
  bool finished_ = false;
};

// A group of processes (an MPI communicator): exchanges of bytes, every member calling each
// in the same order.
class ProcessGroup {
 public:
  ~ProcessGroup();
  int rank() const { return rank_; }
  int size() const { return size_; }

  // `bytes` from member `root` into every member's `data`.
  void broadcast(void* data, size_t bytes, int root);
  // Every member's `bytes` of `in`, side by side in member order, into `out`.
  void all_gather(const void* in, size_t bytes, void* out);
  // Every member p sends `send_bytes[q]` bytes of its `send`, from `send_at[q]`, to member q,
  // which places them at `recv_at[p]` of its `recv` (`recv_bytes[p]` of them): MPI's
  // alltoallv.
  void all_to_all(const std::byte* send, std::span<const size_t> send_bytes,
                  std::span<const size_t> send_at, std::byte* recv,
                  std::span<const size_t> recv_bytes, std::span<const size_t> recv_at);

 private:
  friend class Processes;
  ProcessGroup(void* comm, bool owned);
  void* comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

}  // namespace prism
