package transport

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// An IPv4 client counts by its address, an IPv6 one by its /64: one host has the /64
// whole, and would otherwise have 2^64 addresses to spread its connections over.
func TestHostOfGroupsIPv6By64(t *testing.T) {
	key := func(ip string) string { return hostOf(&net.TCPAddr{IP: net.ParseIP(ip), Port: 1234}) }
	require.Equal(t, "192.0.2.7", key("192.0.2.7"))
	require.Equal(t, "192.0.2.7", key("::ffff:192.0.2.7"), "an IPv4-mapped address is the IPv4 one")
	require.Equal(t, key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff:ffff:ffff:ffff"))
	require.Equal(t, "2001:db8:1:2::/64", key("2001:db8:1:2:aaaa::1"))
	require.NotEqual(t, key("2001:db8:1:2::1"), key("2001:db8:1:3::1"))
}
