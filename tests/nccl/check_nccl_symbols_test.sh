#!/bin/sh
# check_nccl_symbols.sh itself (issue 38 item 7), with a stand-in nm first on PATH: a name
# defined weakly (W) counts as defined; a failing nm gives the "is binutils installed?" message
# and a failure; a name that is missing fails.
# Usage: check_nccl_symbols_test.sh path/to/check_nccl_symbols.sh path/to/libaccord_nccl.so
check=$1 lib=$2
real_nm=$(command -v nm) || { echo "FAIL: no nm (binutils) on PATH"; exit 1; }
tmp=$(mktemp -d /tmp/accord-nm-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# FAKE_NM: weak (ncclAllReduce shown as W), fail (exit 1), missing (ncclSend left out)
cat >"$tmp/nm" <<EOS
#!/bin/sh
case "\$FAKE_NM" in
  fail) echo "nm: stand-in failure" >&2; exit 1 ;;
  weak) "$real_nm" "\$@" | sed 's/ T ncclAllReduce\$/ W ncclAllReduce/' ;;
  missing) "$real_nm" "\$@" | grep -v ' ncclSend\$' ;;
esac
EOS
chmod +x "$tmp/nm"
failures=0
# case FAKE_NM WANT_STATUS NEEDLE
case_() {
  out=$(FAKE_NM=$1 PATH="$tmp:$PATH" "$check" "$lib" 2>&1)
  status=$?
  if [ "$status" != "$2" ] || ! printf '%s\n' "$out" | grep -qF -- "$3"; then
    echo "FAIL - nm $1: exit status $status (want $2), output must contain '$3': $out"
    failures=$((failures + 1))
  else
    echo "ok   - nm $1: exit status $status, '$3'"
  fi
}
"$real_nm" -D --defined-only "$lib" | grep -q ' T ncclAllReduce$' ||
  { echo "FAIL: $lib does not define ncclAllReduce as T, so the weak case proves nothing"; exit 1; }
case_ weak 0 "defines all 38"
case_ fail 1 "is binutils installed?"
case_ missing 1 "does not define (nm -D --defined-only): ncclSend"
[ "$failures" = 0 ] || exit 1
echo "ok"
