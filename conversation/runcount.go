package conversation

import (
	"sync"
	"time"
)

// A run's start is stored while its model is already being called: the round trip that
// stores it is then not added to the time to the first token. A start the database
// refuses must not reach the model (a paid provider bills the call), so the actor calls
// it early only when it knows the start cannot be refused for a reason it can see: the
// request id is new (the actor knows every request id of its session, see
// sessionJournal.requests), and the owner is clearly under the limit of active runs
// (RunCounts). Otherwise the model waits for the database's answer.

// runCountFresh is how long a count the database gave is trusted: runs other nodes
// start meanwhile are not in it.
const runCountFresh = time.Minute

// RunCounts keeps, per user, the number of active runs the database last counted for
// them (each limited start returns it), kept current with the runs this process ends,
// continues and retries. Share one among the actors of a process: the runs of one user
// are in several sessions. The zero value is ready to use.
type RunCounts struct {
	mu sync.Mutex
	m  map[string]*runCount
}

type runCount struct {
	active int
	at     time.Time // when the database counted
}

// clear reports whether owner's next start is surely under limit: the database counted
// within runCountFresh, and one place would still be free after this start (the margin
// is for starts on other nodes since).
func (c *RunCounts) clear(owner string, limit int, now time.Time) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[owner]
	return e != nil && now.Sub(e.at) < runCountFresh && e.active+1 < limit
}

// counted records the database's count of owner's active runs, this start's included
// when it was stored.
func (c *RunCounts) counted(owner string, active int, now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]*runCount)
	}
	if len(c.m) > 10000 { // forget what is stale rather than grow without bound
		for k, e := range c.m {
			if now.Sub(e.at) >= runCountFresh {
				delete(c.m, k)
			}
		}
	}
	c.m[owner] = &runCount{active: max(active, 0), at: now}
}

// add counts a run of owner that became active (delta 1) or ended (-1) in this process.
func (c *RunCounts) add(owner string, delta int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[owner]; e != nil {
		e.active = max(e.active+delta, 0)
	}
}
