// Stand-ins for broken PJRT plugins, for the pjrt backend's bad-input tests. Built three ways:
// FAKE_NO_API (a shared library without GetPjrtApi), FAKE_MAJOR=<n> (a plugin speaking another
// major version of the C API), and neither (a plugin whose client has no device).
#include <cstring>
#include <string>

#include "pjrt_c_api.h"

#ifndef FAKE_NO_API
struct PJRT_Error {
  std::string message;
};
struct PJRT_Client {};

namespace {

void error_message(PJRT_Error_Message_Args* a) {
  a->message = a->error->message.c_str();
  a->message_size = a->error->message.size();
}
void error_destroy(PJRT_Error_Destroy_Args* a) { delete a->error; }
PJRT_Error* client_create(PJRT_Client_Create_Args* a) {
  a->client = new PJRT_Client;
  return nullptr;
}
PJRT_Error* client_destroy(PJRT_Client_Destroy_Args* a) {
  delete a->client;
  return nullptr;
}
PJRT_Error* no_devices(PJRT_Client_AddressableDevices_Args* a) {
  a->addressable_devices = nullptr;
  a->num_addressable_devices = 0;
  return nullptr;
}

}  // namespace

extern "C" const PJRT_Api* GetPjrtApi() {
  static PJRT_Api api = [] {
    PJRT_Api a;
    std::memset(&a, 0, sizeof a);
    a.struct_size = PJRT_Api_STRUCT_SIZE;
    a.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
#ifdef FAKE_MAJOR
    a.pjrt_api_version.major_version = FAKE_MAJOR;
#else
    a.pjrt_api_version.major_version = PJRT_API_MAJOR;
#endif
    a.pjrt_api_version.minor_version = PJRT_API_MINOR;
    a.PJRT_Error_Message = error_message;
    a.PJRT_Error_Destroy = error_destroy;
    a.PJRT_Client_Create = client_create;
    a.PJRT_Client_Destroy = client_destroy;
    a.PJRT_Client_AddressableDevices = no_devices;
    return a;
  }();
  return &api;
}
#endif
