package migrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// howInstalled is the journal's word for a plain bundle installed.
const howInstalled = "plain session bundle installed"

// journal is what earlier runs did, kept in data_dir/migrate.json.
type journal struct {
	Accounts map[string]record `json:"accounts"`
}

// record is what a run did for one account.
type record struct {
	How  string    `json:"how"`
	From string    `json:"from,omitempty"`
	At   time.Time `json:"at"`
}

// journalFile is the journal's name in the data dir.
const journalFile = "migrate.json"

func readJournal(dataDir string) (*journal, error) {
	j := &journal{Accounts: map[string]record{}}
	b, err := os.ReadFile(filepath.Join(dataDir, journalFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return j, nil
	case err != nil:
		return nil, fmt.Errorf("migrate: journal: %w", err)
	}
	if err := json.Unmarshal(b, j); err != nil {
		return nil, fmt.Errorf("migrate: journal %s: %w (remove it to start afresh)", filepath.Join(dataDir, journalFile), err)
	}
	if j.Accounts == nil {
		j.Accounts = map[string]record{}
	}
	return j, nil
}

// record notes what was done for account and saves the journal at once, so
// that a run stopped half-way has said what it did.
func (j *journal) record(dataDir, account, how, from string) error {
	j.Accounts[account] = record{How: how, From: from, At: time.Now().UTC().Truncate(time.Second)}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("migrate: journal: %w", err)
	}
	tmp := filepath.Join(dataDir, journalFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("migrate: journal: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dataDir, journalFile)); err != nil {
		return fmt.Errorf("migrate: journal: %w", err)
	}
	return nil
}

// already says what is in place for account, and who put it there.
func (j *journal) already(account, target string) string {
	r, ok := j.Accounts[account]
	switch {
	case !ok:
		return fmt.Sprintf("%s: %s has credentials already (poolgate's own login, or a copy made by hand); nothing to do", account, target)
	case r.From != "":
		return fmt.Sprintf("%s: already %s from %s by the run of %s; %s has its credentials, nothing to do",
			account, r.How, r.From, r.At.Format(time.RFC3339), target)
	}
	return fmt.Sprintf("%s: %s by the run of %s; %s has its credentials, nothing to do", account, r.How, r.At.Format(time.RFC3339), target)
}
