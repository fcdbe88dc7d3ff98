// Interface selection for the TCP transport (see interface.hpp).
#include "transport/tcp/interface.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <cstring>

namespace accord {
namespace {

bool same_ip(const SockAddr& a, const sockaddr* b) {
  if (a.family() != b->sa_family) return false;
  if (b->sa_family == AF_INET)
    return std::memcmp(&reinterpret_cast<const sockaddr_in&>(a.storage).sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(b)->sin_addr, sizeof(in_addr)) == 0;
  return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(a.storage).sin6_addr,
                     &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string describe(const std::vector<LocalInterface>& all) {
  std::string s;
  for (const LocalInterface& i : all) s += (s.empty() ? "" : ", ") + i.name + " (" + i.addr.to_string() + ")";
  return s.empty() ? "none" : s;
}

}  // namespace

std::vector<LocalInterface> list_interfaces() {
  std::vector<LocalInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || (a->ifa_flags & IFF_UP) == 0) continue;
    const int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    // Link-local IPv6 needs a scope id on every peer: not worth it for a data-centre transport.
    if (family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr))
      continue;
    LocalInterface i;
    i.name = a->ifa_name;
    i.addr.len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&i.addr.storage, a->ifa_addr, i.addr.len);
    i.addr.set_port(0);
    out.push_back(i);
  }
  freeifaddrs(list);
  return out;
}

bool interface_matches(const std::string& spec, const std::string& ifname) {
  std::string s = spec;
  const bool exclude = !s.empty() && s[0] == '^';
  if (exclude) s = s.substr(1);
  const bool exact = !s.empty() && s[0] == '=';
  if (exact) s = s.substr(1);
  bool hit = false;
  for (const std::string& want : split_commas(s))
    hit = hit || (exact ? ifname == want : ifname.compare(0, want.size(), want) == 0);
  return exclude ? !hit : hit;
}

Status choose_local_address(const std::string& ifname_spec, const SockAddr* bootstrap, LocalInterface* out) {
  const std::vector<LocalInterface> all = list_interfaces();
  if (!ifname_spec.empty()) {
    // First IPv4 match, else the first IPv6 one: IPv4 is what clusters configure consistently.
    const LocalInterface* pick = nullptr;
    for (const LocalInterface& i : all) {
      if (!interface_matches(ifname_spec, i.name)) continue;
      if (pick == nullptr || (pick->addr.family() != AF_INET && i.addr.family() == AF_INET)) pick = &i;
    }
    if (pick == nullptr)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_SOCKET_IFNAME='%s' selects no interface that is up with an IP "
                   "address; interfaces here: %s", ifname_spec.c_str(), describe(all).c_str());
    *out = *pick;
    return Status::success();
  }
  if (bootstrap != nullptr && bootstrap->family() != 0) {
    // Connecting a UDP socket sends nothing: it only asks the kernel which local address routes
    // to the bootstrap server.
    Fd probe(socket(bootstrap->family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    SockAddr local;
    local.len = sizeof local.storage;
    if (probe.valid() && connect(probe.get(), reinterpret_cast<const sockaddr*>(&bootstrap->storage), bootstrap->len) == 0 &&
        getsockname(probe.get(), reinterpret_cast<sockaddr*>(&local.storage), &local.len) == 0) {
      local.set_port(0);
      for (const LocalInterface& i : all) {
        if (same_ip(local, reinterpret_cast<const sockaddr*>(&i.addr.storage))) {
          *out = i;
          return Status::success();
        }
      }
      out->name = "(route to " + bootstrap->to_string() + ")";
      out->addr = local;
      return Status::success();
    }
  }
  // No hint: the first interface that is not loopback, else loopback (a one-host job).
  for (const LocalInterface& i : all) {
    if (i.name != "lo" && i.addr.family() == AF_INET) {
      *out = i;
      return Status::success();
    }
  }
  for (const LocalInterface& i : all) {
    if (i.name == "lo") {
      *out = i;
      return Status::success();
    }
  }
  return error(ACCORD_ERR_SYSTEM, "no network interface is up with an IP address for the TCP transport; "
               "interfaces here: %s; set ACCORD_SOCKET_IFNAME", describe(all).c_str());
}

}  // namespace accord
