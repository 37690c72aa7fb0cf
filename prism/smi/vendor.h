// What prism smi's vendor sources share (nvml_source.cpp, rocm_smi_source.cpp,
// level_zero_source.cpp, neuron_source.cpp, tpu_source.cpp): a vendor library opened at run time
// whose functions are looked up by name, and the names of the processes they report.
#pragma once

#include <cstdint>
#include <string>

namespace prism::smi::vendor {

// A process's name, as /proc has it ("" when it is gone or not visible).
std::string process_name(int64_t pid);

// A library opened with dlopen (RTLD_NOW | RTLD_LOCAL; false when it cannot be), closed when
// this is destroyed unless released to the source that goes on calling it.
class Library {
 public:
  explicit Library(const std::string& path);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  explicit operator bool() const { return handle_ != nullptr; }

  // fn = the library's function `symbol`, typed as the vendor's header declares it; the first
  // symbol not found is kept in missing().
  template <typename Fn>
  void load(Fn& fn, const char* symbol) {
    fn = reinterpret_cast<Fn>(find(symbol));
    if (!fn && missing_.empty()) missing_ = symbol;
  }
  const std::string& missing() const { return missing_; }
  // The handle, for dlclose by whoever keeps it (or never, where unloading is not safe).
  void* release();

 private:
  void* find(const char* symbol) const;
  void* handle_ = nullptr;
  std::string missing_;
};

}  // namespace prism::smi::vendor
