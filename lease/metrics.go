package lease

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts what the lease services do.
type Metrics struct {
	renewalFailures prometheus.Counter
}

// NewMetrics returns the lease services' metrics, registered with reg unless it is nil:
// chatd_lease_renewal_failures_total.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{renewalFailures: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatd_lease_renewal_failures_total",
		Help: "Renewals of this node's session leases that failed (the database did not answer); the actors keep running, fenced.",
	})}
	if reg != nil {
		reg.MustRegister(m.renewalFailures)
	}
	return m
}
