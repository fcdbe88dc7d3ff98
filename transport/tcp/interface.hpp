// Which local address the TCP transport listens on. NCCL's rule, reduced to what Accord needs:
// ACCORD_SOCKET_IFNAME picks interfaces by name ("eth0", a prefix "eth", several "eth,ib",
// exact "=eth0", or everything but "^docker,lo"); unset, the interface whose address routes to
// the bootstrap server wins, because ranks that reached the bootstrap server through it can
// almost always reach each other through it too. Listeners bind that one address, never the
// wildcard (RELIABILITY.md: a job must not be reachable from networks it does not use).
#pragma once

#include <string>
#include <vector>

#include "core/status.hpp"
#include "transport/socket.hpp"

namespace accord {

struct LocalInterface {
  std::string name;  // "eth0"
  SockAddr addr;     // port 0
};

// Interfaces that are up and carry an IPv4 or a global IPv6 address, in kernel order.
std::vector<LocalInterface> list_interfaces();

// True if `ifname` is selected by an ACCORD_SOCKET_IFNAME value (see above).
bool interface_matches(const std::string& spec, const std::string& ifname);

// Picks the address to listen on. `bootstrap` may be null or empty (family 0).
Status choose_local_address(const std::string& ifname_spec, const SockAddr* bootstrap, LocalInterface* out);

}  // namespace accord
