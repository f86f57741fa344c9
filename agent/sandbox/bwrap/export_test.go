package bwrap

// Processes returns the states (R, S, T, …) of the processes running in sandbox id, by pid.
func (p *Provider) Processes(id string) map[int]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	bx, ok := p.boxes[id]
	if !ok {
		return map[int]byte{}
	}
	return members(namespaces(bx))
}
