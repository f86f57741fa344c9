package journal

// HaltedQueues returns how many queues the writer retries when its database answers
// again.
func (w *Writer) HaltedQueues() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.halted)
}
