// Package service is the lifecycle of chatd's background parts: a Service runs between
// Start and Stop, and a Group starts services in the order they were added and stops them
// in the reverse order, so each one stops while everything it uses is still there.
//
// Package server (chatd's wiring) builds one Group of every part with a lifecycle (the
// database, the start-up sweep, the sandboxes, the transport, the hub, the HTTP
// listener); a new background service (eviction, abandonment, rescue, lease renewal) is
// one more Add there.
//
// The package owns ordering, error naming and logging of starts and stops, nothing else:
// it does not know what a service does, it restarts nothing and runs nothing on a timer.
// River's startstop is the model.
package service
