#!/usr/bin/env bash
# Installs the build into a scratch prefix and builds a C99 and a C++20 program against it
# using pkg-config only, then runs them; checks that libaccord exports only accord_* symbols.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
meson install -C "$build" --quiet --destdir "$tmp/dest" >/dev/null
# Move the DESTDIR tree to a real prefix and point the .pc file at it.
inst_prefix=$(meson introspect "$build" --buildoptions | python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
mv "$tmp/dest$inst_prefix" "$prefix"
pc=$(find "$prefix" -name accord.pc | head -1)
[ -n "$pc" ] || { echo "no accord.pc installed"; exit 1; }
sed -i "s|^prefix=.*|prefix=$prefix|" "$pc"
export PKG_CONFIG_PATH=$(dirname "$pc")
cflags=$(pkg-config --cflags accord); libs=$(pkg-config --libs accord)
libdir=$(pkg-config --variable=libdir accord)

cat > "$tmp/c_user.c" <<'C'
#include <accord/accord.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {
  accord_comm_t comm;
  float x[3] = {1.0f, 2.0f, 3.0f};
  int version = 0;
  if (accord_get_version(&version) != ACCORD_SUCCESS || version <= 0) return 1;
  if (accord_comm_init_from_env(&comm) != ACCORD_SUCCESS) { puts(accord_last_error(NULL)); return 2; }
  if (accord_all_reduce(x, x, 3, ACCORD_FLOAT32, ACCORD_SUM, comm, NULL) != ACCORD_SUCCESS) return 3;
  accord_comm_destroy(comm);
  printf("c ok %d %g\n", version, x[2]);
  if (argc > 1 && version != atoi(argv[1])) { printf("version %d, pkg-config says %s\n", version, argv[1]); return 5; }
  return x[2] == 3.0f ? 0 : 4;
}
C
cat > "$tmp/cpp_user.cpp" <<'CPP'
#include <accord/accord.hpp>
#include <cstdio>
#include <vector>
int main() {
  accord::Comm comm = accord::Comm::from_env();
  std::vector<int> v = {1, 2, 3};
  comm.all_reduce(std::span<int>(v), accord::Op::kMax);
  try {
    comm.broadcast(std::span<int>(v), 5);  // root out of range
    return 1;
  } catch (const accord::Error& e) {
    if (e.status() != ACCORD_ERR_INVALID_ARGUMENT) return 2;
  }
  std::printf("c++ ok %d\n", v[2]);
  return v[2] == 3 ? 0 : 3;
}
CPP
env -u RANK -u WORLD_SIZE true
cc -std=c99 -Wall -Wextra -pedantic -Werror $cflags "$tmp/c_user.c" -o "$tmp/c_user" $libs
c++ -std=c++20 -Wall -Wextra -Werror $cflags "$tmp/cpp_user.cpp" -o "$tmp/cpp_user" $libs
# accord_get_version agrees with the installed pkg-config version (MAJOR*10000+MINOR*100+PATCH).
want_version=$(pkg-config --modversion accord | awk -F. '{print $1*10000 + $2*100 + $3}')
LD_LIBRARY_PATH=$libdir env -u RANK -u WORLD_SIZE -u OMPI_COMM_WORLD_RANK "$tmp/c_user" "$want_version"
LD_LIBRARY_PATH=$libdir env -u RANK -u WORLD_SIZE -u OMPI_COMM_WORLD_RANK "$tmp/cpp_user"

# Only the public API is exported, and the soname carries the ABI version.
lib=$(ls "$libdir"/libaccord.so.*.*.* | head -1)
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v -e '^accord_' -e '^ACCORD_[0-9]*$' || true)
if [ -n "$bad" ]; then echo "exported symbols outside the public API:"; echo "$bad" | head; exit 1; fi
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[ "$soname" = "libaccord.so.0" ] || { echo "unexpected soname $soname"; exit 1; }
echo "install ok: $(nm -D --defined-only "$lib" | wc -l) exported symbols, soname $soname"

# The framework libraries, when built: they export only their own names.
if [ -e "$libdir/libaccord_mpi.so" ]; then
  bad=$(nm -D --defined-only "$libdir/libaccord_mpi.so" | awk '{print $3}' | grep -v -e '^MPI_' -e '^accord_mpi_interpose_counts$' || true)
  [ -z "$bad" ] || { echo "libaccord_mpi.so exports more than MPI_* wrappers:"; echo "$bad" | head; exit 1; }
  echo "libaccord_mpi.so ok: $(nm -D --defined-only "$libdir/libaccord_mpi.so" | awk '{print $3}' | grep '^MPI_' | tr '\n' ' ')"
fi
if [ -e "$libdir/libaccord_nccl.so" ]; then
  bad=$(nm -D --defined-only "$libdir/libaccord_nccl.so" | awk '{print $3}' | grep -v '^nccl' || true)
  [ -z "$bad" ] || { echo "libaccord_nccl.so exports more than nccl* names:"; echo "$bad" | head; exit 1; }
  link=$libdir/accord-nccl/libnccl.so.2
  [ "$(readlink -f "$link")" = "$(readlink -f "$libdir/libaccord_nccl.so")" ] || { echo "$link does not point at libaccord_nccl.so"; exit 1; }
  echo "libaccord_nccl.so ok: $(nm -D --defined-only "$libdir/libaccord_nccl.so" | wc -l) nccl names, $link"
fi
