package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// ErrStarted is returned by a second Start of a Group, and by a Start after Stop: a
// Group runs once.
var ErrStarted = errors.New("service group was already started")

// Group starts services in the order they were added and stops them in reverse. It is
// itself a Service, so groups nest.
type Group struct {
	log zerolog.Logger

	// mu serializes Start and Stop: a Stop that comes while Start runs waits for it (the
	// start's ctx is how a caller cuts a start short).
	mu       sync.Mutex
	services []named
	state    state
	// started is how many of services (a prefix) are running.
	started int
}

type named struct {
	name string
	svc  Service
}

type state int

const (
	idle    state = iota // services may still be added
	running              // Start succeeded
	stopped              // Stop was called, or Start failed and undid itself
)

var _ Service = (*Group)(nil)

// NewGroup returns an empty Group. It logs each start and stop at debug level, with the
// service's name as the component.
func NewGroup(log zerolog.Logger) *Group {
	return &Group{log: log}
}

// Add appends svc under name; it starts after every service added before it and stops
// before them. Names appear in logs and errors. Add panics when name is empty or taken,
// or once Start was called: those are wiring mistakes, not conditions to handle.
func (g *Group) Add(name string, svc Service) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case name == "":
		panic("service: Add with an empty name")
	case svc == nil:
		panic(fmt.Sprintf("service: Add %q with a nil Service", name))
	case g.state != idle:
		panic(fmt.Sprintf("service: Add %q after Start", name))
	}
	for _, s := range g.services {
		if s.name == name {
			panic(fmt.Sprintf("service: Add %q twice", name))
		}
	}
	g.services = append(g.services, named{name, svc})
}

// Start starts every service in order and returns once all run. When one fails, those
// already started are stopped in reverse order and the error, naming the service, is
// returned with theirs; the group is then stopped. That undoing is not bounded by ctx
// (which may be why the start failed): the services have done no work yet, and a
// cancelled ctx must not turn their stop into a forced one. Start returns ErrStarted
// when the group was started or stopped before.
func (g *Group) Start(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != idle {
		return ErrStarted
	}
	for _, s := range g.services {
		log := g.log.With().Str("component", s.name).Logger()
		log.Debug().Msg("starting")
		began := time.Now()
		if err := s.svc.Start(ctx); err != nil {
			err = fmt.Errorf("start %s: %w", s.name, err)
			return errors.Join(err, g.stopStarted(context.WithoutCancel(ctx)))
		}
		g.started++
		log.Debug().Stringer("took", time.Since(began)).Msg("started")
	}
	g.state = running
	return nil
}

// Stop stops the started services in reverse order and returns their errors joined,
// each naming its service. A service whose Stop fails counts as stopped: the next one is
// stopped all the same, and none is stopped twice. ctx is passed to each Stop. Stop is
// safe before Start, after a Start that failed, and a second time; it then returns nil.
func (g *Group) Stop(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopStarted(ctx)
}

// stopStarted stops what runs and marks the group stopped. g.mu is held.
func (g *Group) stopStarted(ctx context.Context) error {
	g.state = stopped
	var errs []error
	for ; g.started > 0; g.started-- {
		s := g.services[g.started-1]
		log := g.log.With().Str("component", s.name).Logger()
		log.Debug().Msg("stopping")
		began := time.Now()
		if err := s.svc.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", s.name, err))
			continue // returned, not logged
		}
		log.Debug().Stringer("took", time.Since(began)).Msg("stopped")
	}
	return errors.Join(errs...)
}
