package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A tab is caught up by the first token due after its reconnect: as a delta, or in the
// text of the snapshot that answered the reconnect, whichever came first.
func TestCaughtUpAfter(t *testing.T) {
	at := time.Unix(1000, 0)
	tb := &tab{reconnectAt: at}
	_, ok := tb.caughtUpAfter()
	assert.False(t, ok)

	tb.caughtUp, tb.caughtUpDone = 40*time.Millisecond, true
	d, ok := tb.caughtUpAfter()
	assert.True(t, ok)
	assert.Equal(t, 40*time.Millisecond, d)

	// A snapshot with no token due after the reconnect does not count.
	tb.snapAt, tb.snap = at.Add(5*time.Millisecond), transcript{next: 10, firstNew: -1}
	d, _ = tb.caughtUpAfter()
	assert.Equal(t, 40*time.Millisecond, d)

	// One holding such a token does, once it arrived.
	tb.snap.firstNew = 9
	d, _ = tb.caughtUpAfter()
	assert.Equal(t, 5*time.Millisecond, d)
	tb.caughtUp, tb.caughtUpDone = 0, false
	d, ok = tb.caughtUpAfter()
	assert.True(t, ok)
	assert.Equal(t, 5*time.Millisecond, d)

	// A snapshot from before the reconnect (the first hello's) does not count.
	tb.snapAt = at.Add(-time.Second)
	_, ok = tb.caughtUpAfter()
	assert.False(t, ok)
}

func TestCheckSnapshots(t *testing.T) {
	at := time.Unix(1000, 0)
	whole := &tab{reconnectAt: at, snapAt: at.Add(time.Millisecond), snap: transcript{next: 120}}
	garbled := &tab{reconnectAt: at, snapAt: at.Add(time.Millisecond), snap: transcript{next: 120, gaps: 1}}
	behind := &tab{reconnectAt: at, snapAt: at.Add(time.Millisecond), snap: transcript{next: 90}}
	replayed := &tab{reconnectAt: at, snapAt: at.Add(-time.Second), snap: transcript{next: 5}} // no snapshot this time
	tabs := []*tab{whole, garbled, behind, replayed}
	c := checkSnapshots(tabs, map[*tab]int{whole: 100, garbled: 100, behind: 100, replayed: 100},
		map[string]float64{"MessagesListBefore": 3, "LeaseRenew": 1, "RunGet": 0})
	assert.Equal(t, 1, c.badText)
	assert.Equal(t, 1, c.behind)
	assert.Equal(t, "LeaseRenew 1, MessagesListBefore 3", c.statements)
	assert.Equal(t, "none", breakdown(nil))
}

// A stale epoch is never the session's.
func TestStaleEpoch(t *testing.T) {
	assert.NotEqual(t, "abc", staleEpoch("abc"))
	assert.NotEqual(t, "", staleEpoch(""))
}
