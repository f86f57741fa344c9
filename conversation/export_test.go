package conversation

// Dropped is how many bytes of messages quiet actors reported dropping since the last
// return.
func (m *MemoryReturner) Dropped() int64 { return m.released.Load() }
