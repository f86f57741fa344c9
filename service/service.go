package service

import "context"

// Service is a part of chatd that runs in the background between Start and Stop.
type Service interface {
	// Start returns once the service is running. ctx bounds the start only: a service
	// that keeps working after Start returns must not hold on to it. A Start that fails
	// leaves nothing running.
	Start(ctx context.Context) error
	// Stop returns once the service has stopped and its goroutines are gone. ctx bounds
	// a graceful stop: when it ends, the service stops at once instead (dropping what it
	// had not finished) and still returns only when it is gone.
	Stop(ctx context.Context) error
}

// Func returns a Service made of two functions, for a part that needs no type of its
// own. Either may be nil when there is nothing to do: a start-up task has no stop, and an
// object built ready to use has no start.
func Func(start, stop func(ctx context.Context) error) Service {
	return funcService{start: start, stop: stop}
}

type funcService struct {
	start, stop func(ctx context.Context) error
}

func (f funcService) Start(ctx context.Context) error {
	if f.start == nil {
		return nil
	}
	return f.start(ctx)
}

func (f funcService) Stop(ctx context.Context) error {
	if f.stop == nil {
		return nil
	}
	return f.stop(ctx)
}
