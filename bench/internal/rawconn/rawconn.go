// Package rawconn dials the load generators' TCP connections on blocking
// sockets, used through plain system calls rather than the runtime's
// poller: a connection then costs the load generator only the system
// calls of its packets, so what a benchmark measures is the broker's cost.
package rawconn
