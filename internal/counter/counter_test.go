package counter

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

func TestShardedSumsEverySlot(t *testing.T) {
	var c Sharded
	var wg sync.WaitGroup
	for g := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := c.Slot()
			for range 1000 {
				s.Add(uint64(g % 3))
			}
		}()
	}
	wg.Wait()
	var want uint64
	for g := range 200 {
		want += uint64(g%3) * 1000
	}
	require.Equal(t, want, c.Load())
}

func TestSlotsAreHandedOutInTurnOnTheirOwnLines(t *testing.T) {
	var c Sharded
	first := c.Slot()
	seen := map[*Slot]bool{first: true}
	for range slots - 1 {
		seen[c.Slot()] = true
	}
	require.Len(t, seen, slots, "every slot once before any twice")
	require.Same(t, first, c.Slot())
	require.EqualValues(t, 64, unsafe.Sizeof(Slot{}))
}
