package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// What a provider leaves on disk and in its commands' environments so that, should chatd
// die without ending them, a later chatd finds what they left running (sweep.go). Memory
// dies with the process; these do not.
//
// Each provider keeps, in every sandbox directory where something of its runs, a record
// file of the process groups it runs there and their members, identified by pid and
// start time, rewritten as groups start and end. And every command's environment names
// its sandbox directory and the chatd process that started it; what it starts inherits
// that, unless it clears its environment.

const (
	// recordPrefix and recordSuffix frame the name of a record file: one per provider
	// and sandbox (several providers may share a directory), in the sandbox's directory.
	recordPrefix = ".processes-"
	recordSuffix = ".json"

	// envSandbox names the command's sandbox directory; envOwner the chatd process.
	envSandbox = "CHATD_SANDBOX"
	envOwner   = "CHATD_SANDBOX_OWNER"
)

// owner is a chatd process: its pid, and its start time so that a later process with the
// same pid is not taken for it.
type owner struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

func (o owner) String() string {
	return strconv.Itoa(o.PID) + ":" + strconv.FormatUint(o.Start, 10)
}

func parseOwner(s string) (owner, bool) {
	p, st, ok := strings.Cut(s, ":")
	if !ok {
		return owner{}, false
	}
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(st, 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return owner{}, false
	}
	return owner{PID: pid, Start: start}, true
}

// record is a record file's content.
type record struct {
	// Boot is the kernel's boot id: start times count from boot, and nothing recorded
	// before a reboot still runs.
	Boot  string `json:"boot"`
	Owner owner  `json:"owner"`
	// Groups are the process groups by id, with their members known to be ours.
	Groups map[int]members `json:"groups"`
}

// recordFile is one provider's record of one sandbox.
type recordFile struct {
	path  string
	boot  string
	owner owner
	// saved is what the file holds, nil when there is none.
	saved []byte
}

// save makes the file hold groups, writing only what changed; no groups, no file. The
// file is replaced whole (renamed into place), so a reader never sees half of it.
func (f *recordFile) save(groups map[int]members) error {
	var data []byte
	if len(groups) > 0 {
		var err error
		if data, err = json.Marshal(record{Boot: f.boot, Owner: f.owner, Groups: groups}); err != nil {
			return err
		}
	}
	if bytes.Equal(data, f.saved) {
		return nil
	}
	if data == nil {
		if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		f.saved = nil
		return nil
	}
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, f.path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	f.saved = data
	return nil
}

// bootID is the kernel's id of this boot ("" when it cannot be read: then records are
// taken to be from this boot, and start times still guard against reused pids).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
