package server

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector reports a pgx pool's statistics, read from the pool at each scrape: the
// pool counts them anyway, so there is nothing to sample in between and no goroutine to
// own.
type poolCollector struct {
	pool *pgxpool.Pool
}

var (
	poolConnsDesc = prometheus.NewDesc("chatd_db_pool_connections",
		"Database connections in the pool, by state: acquired (in use), idle, and total (those two plus any being opened).",
		[]string{"state"}, nil)
	poolMaxConnsDesc = prometheus.NewDesc("chatd_db_pool_max_connections",
		"The most connections the pool opens.", nil, nil)
	poolAcquiresDesc = prometheus.NewDesc("chatd_db_pool_acquires_total",
		"Connections taken from the pool.", nil, nil)
	poolWaitsDesc = prometheus.NewDesc("chatd_db_pool_acquire_waits_total",
		"Connections taken from the pool that had to wait, none being idle.", nil, nil)
	poolWaitSecondsDesc = prometheus.NewDesc("chatd_db_pool_acquire_wait_seconds_total",
		"Time spent in those waits; its rate against the waits' is the mean wait.", nil, nil)
)

func newPoolCollector(pool *pgxpool.Pool) *poolCollector {
	return &poolCollector{pool: pool}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolConnsDesc
	ch <- poolMaxConnsDesc
	ch <- poolAcquiresDesc
	ch <- poolWaitsDesc
	ch <- poolWaitSecondsDesc
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	ch <- prometheus.MustNewConstMetric(poolConnsDesc, gauge, float64(s.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(poolConnsDesc, gauge, float64(s.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(poolConnsDesc, gauge, float64(s.TotalConns()), "total")
	ch <- prometheus.MustNewConstMetric(poolMaxConnsDesc, gauge, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(poolAcquiresDesc, counter, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolWaitsDesc, counter, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolWaitSecondsDesc, counter, s.EmptyAcquireWaitTime().Seconds())
}
