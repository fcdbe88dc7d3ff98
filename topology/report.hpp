// Human and machine views of a System and its Plan: the text report of accord-topo (GPU matrix in
// nvidia-smi's legend, peer access, NUMA affinity, rings, trees, predictions, and one line per
// pair that goes through host memory, saying why) and a Graphviz drawing.
#pragma once

#include <string>

#include "topology/search.hpp"
#include "topology/system.hpp"

namespace accord::topo {

std::string render_text(const System& s, const Plan& plan);
// Graphviz: GPUs grouped by NUMA node, an edge per GPU pair (dashed through host memory), the
// first ring's hops bold.
std::string render_dot(const System& s, const Plan& plan);

}  // namespace accord::topo
