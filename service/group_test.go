package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/service"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// journal records the calls made to the fake services of one test, in order.
type journal struct {
	mu    sync.Mutex
	calls []string
}

func (j *journal) add(call string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls = append(j.calls, call)
}

func (j *journal) list() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.calls...)
}

// fake is a service that records its calls and fails when told to.
type fake struct {
	name              string
	j                 *journal
	startErr, stopErr error
	// stopCtx is the ctx its last Stop was given.
	stopCtx context.Context
}

func (f *fake) Start(ctx context.Context) error {
	f.j.add("start " + f.name)
	return f.startErr
}

func (f *fake) Stop(ctx context.Context) error {
	f.j.add("stop " + f.name)
	f.stopCtx = ctx
	return f.stopErr
}

type bundle struct {
	j     *journal
	fakes map[string]*fake
	log   *bytes.Buffer
}

// setup returns a group of fake services named names, added in that order.
func setup(t *testing.T, names ...string) (*service.Group, *bundle) {
	t.Helper()
	b := &bundle{j: &journal{}, fakes: map[string]*fake{}, log: &bytes.Buffer{}}
	g := service.NewGroup(zerolog.New(b.log).Level(zerolog.DebugLevel))
	for _, n := range names {
		f := &fake{name: n, j: b.j}
		b.fakes[n] = f
		g.Add(n, f)
	}
	return g, b
}

func TestStartsInOrderStopsInReverse(t *testing.T) {
	t.Parallel()
	g, b := setup(t, "database", "sandboxes", "hub", "http")
	ctx := context.Background()
	require.NoError(t, g.Start(ctx))
	require.Equal(t, []string{"start database", "start sandboxes", "start hub", "start http"}, b.j.list())
	require.NoError(t, g.Stop(ctx))
	require.Equal(t, []string{
		"start database", "start sandboxes", "start hub", "start http",
		"stop http", "stop hub", "stop sandboxes", "stop database",
	}, b.j.list())
}

// A failed start undoes itself: what started is stopped in reverse, the failed service
// and the ones after it are not touched, and the error says which one failed.
func TestFailedStartStopsWhatStarted(t *testing.T) {
	t.Parallel()
	g, b := setup(t, "database", "sandboxes", "hub", "http")
	boom := errors.New("address in use")
	b.fakes["hub"].startErr = boom

	err := g.Start(context.Background())
	require.ErrorIs(t, err, boom)
	require.EqualError(t, err, "start hub: address in use")
	require.Equal(t, []string{
		"start database", "start sandboxes", "start hub",
		"stop sandboxes", "stop database",
	}, b.j.list())

	// The group is stopped now: Stop has nothing left to do, Start does not run again.
	require.NoError(t, g.Stop(context.Background()))
	require.ErrorIs(t, g.Start(context.Background()), service.ErrStarted)
	require.Len(t, b.j.list(), 5)
}

// The errors of the undoing are returned with the start's, each naming its service.
func TestFailedStartReturnsStopErrorsToo(t *testing.T) {
	t.Parallel()
	g, b := setup(t, "database", "sandboxes", "hub")
	b.fakes["hub"].startErr = errors.New("no")
	b.fakes["database"].stopErr = errors.New("pool busy")
	err := g.Start(context.Background())
	require.EqualError(t, err, "start hub: no\nstop database: pool busy")
	require.Equal(t, []string{"start database", "start sandboxes", "start hub", "stop sandboxes", "stop database"}, b.j.list())
}

// A start cut short by its ctx still stops what it started gracefully: the undoing does
// not inherit the cancellation (values pass through).
func TestFailedStartStopsWithoutTheCancellation(t *testing.T) {
	t.Parallel()
	g, b := setup(t, "database", "hub")
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	cancel()
	b.fakes["hub"].startErr = context.Canceled
	require.ErrorIs(t, g.Start(ctx), context.Canceled)
	stopCtx := b.fakes["database"].stopCtx
	require.NotNil(t, stopCtx)
	require.NoError(t, stopCtx.Err())
	require.Equal(t, "v", stopCtx.Value(key{}))
}

// Every service is stopped even when some fail to; the errors are joined, each naming its
// service, and Stop gets the caller's ctx.
func TestStopJoinsErrors(t *testing.T) {
	t.Parallel()
	g, b := setup(t, "database", "transport", "hub", "http")
	hubErr, dbErr := errors.New("runs not stored"), errors.New("pool close")
	b.fakes["hub"].stopErr = hubErr
	b.fakes["database"].stopErr = dbErr
	require.NoError(t, g.Start(context.Background()))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := g.Stop(ctx)
	require.ErrorIs(t, err, hubErr)
	require.ErrorIs(t, err, dbErr)
	require.EqualError(t, err, "stop hub: runs not stored\nstop database: pool close")
	require.Equal(t, []string{"stop http", "stop hub", "stop transport", "stop database"}, b.j.list()[4:])
	require.Equal(t, ctx, b.fakes["transport"].stopCtx)
}

func TestStopTwiceStopsOnce(t *testing.T) {
	t.Parallel()
	g, b := setup(t, "a", "b")
	b.fakes["a"].stopErr = errors.New("once")
	require.NoError(t, g.Start(context.Background()))
	require.Error(t, g.Stop(context.Background()))
	require.NoError(t, g.Stop(context.Background()), "a second Stop has nothing to stop")
	require.Equal(t, []string{"start a", "start b", "stop b", "stop a"}, b.j.list())
}

func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	g, b := setup(t, "a", "b")
	require.NoError(t, g.Stop(context.Background()))
	require.Empty(t, b.j.list())
	require.ErrorIs(t, g.Start(context.Background()), service.ErrStarted, "a stopped group does not start")
	require.Empty(t, b.j.list())
}

func TestStartTwice(t *testing.T) {
	t.Parallel()
	g, b := setup(t, "a")
	require.NoError(t, g.Start(context.Background()))
	require.ErrorIs(t, g.Start(context.Background()), service.ErrStarted)
	require.NoError(t, g.Stop(context.Background()))
	require.Equal(t, []string{"start a", "stop a"}, b.j.list())
}

func TestEmptyGroup(t *testing.T) {
	t.Parallel()
	g := service.NewGroup(zerolog.Nop())
	require.NoError(t, g.Start(context.Background()))
	require.NoError(t, g.Stop(context.Background()))
}

func TestAddMistakesPanic(t *testing.T) {
	t.Parallel()
	g, _ := setup(t, "hub")
	require.PanicsWithValue(t, `service: Add "hub" twice`, func() { g.Add("hub", service.Func(nil, nil)) })
	require.PanicsWithValue(t, "service: Add with an empty name", func() { g.Add("", service.Func(nil, nil)) })
	require.PanicsWithValue(t, `service: Add "x" with a nil Service`, func() { g.Add("x", nil) })
	require.NoError(t, g.Start(context.Background()))
	require.PanicsWithValue(t, `service: Add "late" after Start`, func() { g.Add("late", service.Func(nil, nil)) })
	require.NoError(t, g.Stop(context.Background()))
}

func TestFunc(t *testing.T) {
	t.Parallel()
	j := &journal{}
	svc := service.Func(
		func(context.Context) error { j.add("start"); return nil },
		func(context.Context) error { j.add("stop"); return errors.New("stuck") },
	)
	require.NoError(t, svc.Start(context.Background()))
	require.EqualError(t, svc.Stop(context.Background()), "stuck")
	require.Equal(t, []string{"start", "stop"}, j.list())

	none := service.Func(nil, nil)
	require.NoError(t, none.Start(context.Background()))
	require.NoError(t, none.Stop(context.Background()))
}

// A group is a service: a nested group starts and stops in its place in the order.
func TestGroupsNest(t *testing.T) {
	t.Parallel()
	g, b := setup(t, "database")
	inner := service.NewGroup(zerolog.Nop())
	for _, n := range []string{"lease", "rescuer"} {
		inner.Add(n, &fake{name: n, j: b.j})
	}
	g.Add("maintenance", inner)
	g.Add("http", &fake{name: "http", j: b.j})
	require.NoError(t, g.Start(context.Background()))
	require.NoError(t, g.Stop(context.Background()))
	require.Equal(t, []string{
		"start database", "start lease", "start rescuer", "start http",
		"stop http", "stop rescuer", "stop lease", "stop database",
	}, b.j.list())
}

// Starts and stops are logged at debug level with the service's name as the component;
// failures are returned, not logged.
func TestLogs(t *testing.T) {
	t.Parallel()
	g, b := setup(t, "database", "hub")
	b.fakes["hub"].stopErr = errors.New("slow")
	require.NoError(t, g.Start(context.Background()))
	require.Error(t, g.Stop(context.Background()))

	var got []string
	for _, line := range strings.Split(strings.TrimSpace(b.log.String()), "\n") {
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
		require.Equal(t, "debug", entry["level"], line)
		if entry["message"] == "started" || entry["message"] == "stopped" {
			require.NotEmpty(t, entry["took"], line)
		}
		got = append(got, fmt.Sprint(entry["component"], " ", entry["message"]))
	}
	require.Equal(t, []string{
		"database starting", "database started", "hub starting", "hub started",
		"hub stopping", "database stopping", "database stopped",
	}, got)
}
