package journal

// HaltedQueues returns how many queues the writer retries when its database answers
// again.
func (w *Writer) HaltedQueues() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.halted)
}

// OnSync has f told of the outcome of each interval's statement of the stream log, once
// its metrics count it. It must be called before Start.
func (w *Writer) OnSync(f func(error)) { w.synced = f }
