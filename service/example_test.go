package service_test

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/service"
)

// worker is a service with a goroutine: Start launches it, Stop ends it and waits.
type worker struct {
	jobs chan string
	done chan struct{}
}

func (w *worker) Start(context.Context) error {
	w.jobs, w.done = make(chan string), make(chan struct{})
	go func() {
		defer close(w.done)
		for job := range w.jobs {
			fmt.Println("worked on", job)
		}
	}()
	return nil
}

// Stop needs no bound of its own: the loop ends after the job at hand, which is short.
func (w *worker) Stop(context.Context) error {
	close(w.jobs)
	<-w.done
	return nil
}

func Example() {
	w := &worker{}
	g := service.NewGroup(zerolog.Nop())
	g.Add("database", service.Func(
		func(context.Context) error { fmt.Println("database open"); return nil },
		func(context.Context) error { fmt.Println("database closed"); return nil },
	))
	g.Add("worker", w)

	ctx := context.Background()
	if err := g.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	w.jobs <- "a job"
	if err := g.Stop(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// database open
	// worked on a job
	// database closed
}
