package conversation

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/chatd/chatd/chat"
)

// Progress of long runs (Emitter.Progress). A report replaces the run's progress and is
// published at once as a run.status, so every tab sees it live and a snapshot or replay
// has it (it is part of the run). It is stored write-behind with the run, coalesced: the
// first report after a quiet window is queued at once, the ones within the window
// (Config.ProgressStoreInterval) only by the last of them when the window ends, and the
// run's end or suspension stores the latest whatever the window. A crash loses at most
// one window of reports; the run continued after it starts from the last one stored.

type progressIntent struct {
	run      *runState
	progress *chat.Progress // nil clears it
}

// checkProgress validates a report: of 1 to chat.MaxProgressSteps, step 0 to of, label
// at most chat.MaxProgressLabel characters of valid UTF-8 with no control characters but
// spaces; (0, 0, "") clears the progress (nil).
func checkProgress(step, of int, label string) (*chat.Progress, error) {
	switch {
	case step == 0 && of == 0 && label == "":
		return nil, nil
	case of < 1 || of > chat.MaxProgressSteps:
		return nil, errorf(CodeBadRequest, "progress: of is %d; it must be 1 to %d", of, chat.MaxProgressSteps)
	case step < 0 || step > of:
		return nil, errorf(CodeBadRequest, "progress: step is %d; it must be 0 to of (%d)", step, of)
	case !utf8.ValidString(label):
		return nil, errorf(CodeBadRequest, "progress: label is not valid UTF-8")
	case utf8.RuneCountInString(label) > chat.MaxProgressLabel:
		return nil, errorf(CodeBadRequest, "progress: label is %d characters; the limit is %d", utf8.RuneCountInString(label), chat.MaxProgressLabel)
	}
	for _, r := range label {
		if r < 0x20 || r == 0x7f {
			return nil, errorf(CodeBadRequest, "progress: label contains a control character")
		}
	}
	return &chat.Progress{Step: step, Of: of, Label: label}, nil
}

// onProgress makes p the run's progress and tells every tab; it is stored write-behind.
func (a *Actor) onProgress(run *runState, p *chat.Progress) {
	if !a.isCurrent(run) || sameProgress(run.info.Progress, p) {
		return
	}
	run.info.Progress = p
	a.publish(a.runEvent(run, Event{Type: EventRunStatus, Run: runView(run)}))
	run.progressDirty = true
	if a.progressT.timer == nil {
		a.storeProgress() // the first in a while: at once
	}
}

// storeProgress queues the active run's latest progress and agent state, if they are
// not queued yet, and starts a window in which the next reports wait.
func (a *Actor) storeProgress() {
	run := a.run
	if run == nil || !run.progressDirty {
		return
	}
	run.progressDirty = false
	// The whole run, as it is now: its status, usage and activity with it. Not waited
	// for: a report is no token's reason to wait for the database.
	if err := a.journal.updateRun(run.info); err != nil {
		a.logger().Error().Err(err).Str("run_id", run.info.ID.String()).Msg("store a run's progress")
	}
	a.arm(&a.progressT, a.cfg.ProgressStoreInterval)
}

// agentStateIntent is an agent's state report (Emitter.State), checked.
type agentStateIntent struct {
	run   *runState
	state json.RawMessage
}

// checkAgentState validates a state report: one JSON value of at most
// chat.MaxAgentState bytes, kept compact.
func checkAgentState(state json.RawMessage) (json.RawMessage, error) {
	if len(state) > chat.MaxAgentState {
		return nil, errorf(CodeBadRequest, "agent state is %d bytes; the limit is %d", len(state), chat.MaxAgentState)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, state); err != nil || b.Len() == 0 {
		return nil, errorf(CodeBadRequest, "agent state is not JSON")
	}
	return json.RawMessage(b.Bytes()), nil
}

// onAgentState makes state the run's and the session's latest agent state; like
// progress, it is stored write-behind with the run. No tab is told: it is the agent's.
func (a *Actor) onAgentState(run *runState, state json.RawMessage) {
	if !a.isCurrent(run) {
		return
	}
	run.info.AgentState = state
	a.journal.knowAgentState(state)
	run.progressDirty = true
	if a.progressT.timer == nil {
		a.storeProgress()
	}
}

func sameProgress(x, y *chat.Progress) bool {
	if x == nil || y == nil {
		return x == y
	}
	return *x == *y
}
