# Sourced by the two-host tests: two network namespaces, $A and $B, joined by a veth pair
# ($ADDR_A <-> $ADDR_B, addresses that exist only inside them), removed at exit with $work.
# Inside them the hosts are also named $HOST_A and $HOST_B, and this machine's own hostname
# resolves to the namespace's address (/etc/netns/NS/hosts, which `ip netns exec` mounts over
# /etc/hosts), as on two real machines: tools that ask "is this name me?" (torchrun) get it right.
# Exits 77 (skipped) with the reason when namespaces cannot be made (not root, no iproute2).
A=cc-hostA-$$ B=cc-hostB-$$
ADDR_A=10.231.0.1 ADDR_B=10.231.0.2
HOST_A=cc-node-a-$$ HOST_B=cc-node-b-$$

skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "iproute2 (ip) not installed"

cleanup() {
  for ns in "$A" "$B"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "$work"
}
work=$(mktemp -d)
trap cleanup EXIT

ip netns add "$A" 2>/dev/null || skip "cannot create network namespaces here (ip netns add failed)"
ip netns add "$B" || skip "cannot create a second network namespace"
ip link add "va$$" type veth peer name "vb$$" || skip "cannot create a veth pair"
ip link set "va$$" netns "$A"
ip link set "vb$$" netns "$B"
ip -n "$A" addr add "$ADDR_A/24" dev "va$$"
ip -n "$B" addr add "$ADDR_B/24" dev "vb$$"
for ns in "$A" "$B"; do
  ip -n "$ns" link set lo up
done
for pair in "$A $ADDR_A $HOST_A" "$B $ADDR_B $HOST_B"; do
  read -r ns addr name <<<"$pair"
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n%s %s %s\n%s %s\n%s %s\n' "$addr" "$name" "$(hostname)" \
    "$ADDR_A" "$HOST_A" "$ADDR_B" "$HOST_B" >"/etc/netns/$ns/hosts"
done
ip -n "$A" link set "va$$" up
ip -n "$B" link set "vb$$" up
