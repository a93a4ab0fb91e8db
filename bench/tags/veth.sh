# bench/tags/veth.sh: tcp_veth's two hosts, sourced by run.sh and ab.sh.
#
#   veth_hosts NS_C NS_S NET   (as root)
#
# Makes network namespaces NS_C (the client) and NS_S (the server) joined
# by a veth pair, addresses NET.1 and NET.2 (a /24), and exports what
# micro.c's tcp_veth reads: MICRO_NS_CLIENT, MICRO_NS_SERVER and
# MICRO_ADDR_SERVER. The caller deletes the namespaces (which removes the
# pair). Returns non-zero, with the namespaces made so far left to the
# caller's cleanup, when a step fails.
veth_hosts() {
	local c=$1 s=$2 net=$3 ic="vc$$" is="vs$$"
	ip netns add "$c" && ip netns add "$s" &&
		ip link add "$ic" netns "$c" type veth peer name "$is" netns "$s" &&
		ip -n "$c" addr add "$net.1/24" dev "$ic" && ip -n "$s" addr add "$net.2/24" dev "$is" &&
		ip -n "$c" link set "$ic" up && ip -n "$s" link set "$is" up &&
		ip -n "$c" link set lo up && ip -n "$s" link set lo up || return 1
	export MICRO_NS_CLIENT=/run/netns/$c MICRO_NS_SERVER=/run/netns/$s MICRO_ADDR_SERVER=$net.2
}
