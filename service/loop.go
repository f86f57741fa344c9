package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Loop is the goroutine of a service that runs until it is stopped: Start runs it, Stop
// tells it to stop and waits for it. The zero value is ready to use; a Loop runs once.
type Loop struct {
	mu   sync.Mutex
	stop chan struct{}
	done chan struct{}
}

// Start runs run in a goroutine of its own; run returns once stop is closed. A second
// Start is an error.
func (l *Loop) Start(run func(stop <-chan struct{})) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return errors.New("service: already started")
	}
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	stop, done := l.stop, l.done
	go func() {
		defer close(done)
		run(stop)
	}()
	return nil
}

// Stop closes run's stop channel and waits for run to return, or for ctx to end. A Loop
// never started stops at once.
func (l *Loop) Stop(ctx context.Context) error {
	l.mu.Lock()
	stop, done := l.stop, l.done
	l.stop = nil
	l.mu.Unlock()
	if done == nil {
		return nil
	}
	if stop != nil {
		close(stop)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Every runs f at once, then every interval on clock, until stop is closed: for a Loop's
// run. The context f gets ends when stop is closed, so a pass under way stops at its
// next statement.
func Every(stop <-chan struct{}, clock clockwork.Clock, interval time.Duration, f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	ticker := clock.NewTicker(interval)
	defer ticker.Stop()
	for {
		f(ctx)
		select {
		case <-ticker.Chan():
		case <-ctx.Done():
			return
		}
	}
}
