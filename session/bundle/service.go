// The bundle service moves session bundles between workers, the bundle
// store and the admin API: the daemon wires a Service into the admin endpoints
// (Export, Import), the worker's pre-start hook (Restore) and its ready hook
// (Saved). It reaches the workers' work dirs through Instances, a small
// interface the supervisor is adapted to.
package bundle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Config configures the bundle service.
type Config struct {
	// Key seals and opens bundles (32 bytes, from POOLGATE_BUNDLE_KEY via
	// ParseKey). Default none: bundles are disabled, Export and
	// Import return ErrNoKey, Restore and Saved do nothing.
	Key []byte
	// Spec is the driver's credential layout (its worker.Kind's
	// Credentials). The zero Spec: the kind of worker keeps no login in its
	// work dir, so there is nothing to export, import, save or restore.
	Spec Spec
	// SpecFor returns the layout of an account's kind, in a pool whose
	// accounts are of several kinds (default nil: Spec for every account).
	SpecFor func(account string) Spec
	// Limits bound what Import and Restore accept. Default Limits'
	// defaults (1 MiB sealed, 4 MiB unpacked, 64 files).
	Limits Limits
	// Configured are sealed bundles from the accounts' config
	// (session_bundle, or the content of session_bundle_file), by account
	// name; Restore falls back to them. Default none.
	Configured map[string][]byte
	// Now tells the time. Default time.Now.
	Now func() time.Time
	// Token returns the fencing token of this replica's lease on account,
	// and false when it holds none (then it saves no bundle: only the
	// account's holder may). Default nil: not clustered, every save has
	// token 0.
	Token func(account string) (int64, bool)
}

// Instances is what the service needs of the supervisor: where an instance
// keeps its credentials, and a restart onto new ones.
type Instances interface {
	// Home describes the named instance; an error (wrapping
	// supervisor.ErrUnknownInstance) when there is none.
	Home(name string) (Home, error)
	// Restart restarts the named instance.
	Restart(name string) error
}

// Home is where an instance keeps its credentials.
type Home struct {
	// Account is the account the instance runs as; Username its login name.
	Account  string
	Username string
	// WorkDir is the worker's directory, which holds the credential dir.
	WorkDir string
	// LoggedOut: the worker says it needs a login, so it has nothing to
	// export.
	LoggedOut bool
}

// Service exports, imports, saves and restores session bundles. It is safe
// for concurrent use; installs are serialised.
type Service struct {
	cfg       Config
	instances Instances
	storage   Store
	log       *slog.Logger

	mu    sync.Mutex // serialises work dir changes
	noKey sync.Once

	confMu     sync.Mutex
	configured map[string][]byte // starts as cfg.Configured; SetConfigured replaces it
}

// New returns a bundle service. instances may be nil when only Restore and
// Saved are used.
func New(cfg Config, instances Instances, store Store, log *slog.Logger) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log = cmp.Or(log, slog.Default())
	return &Service{cfg: cfg, instances: instances, storage: store, log: log, configured: cfg.Configured}
}

// SetConfigured replaces the configured bundles (Config.Configured) after a
// reload of the accounts; the next Restore falls back to these.
func (s *Service) SetConfigured(configured map[string][]byte) {
	s.confMu.Lock()
	defer s.confMu.Unlock()
	s.configured = configured
}

func (s *Service) configuredFor(account string) ([]byte, bool) {
	s.confMu.Lock()
	defer s.confMu.Unlock()
	sealed, ok := s.configured[account]
	return sealed, ok
}

// errNoLayout: the driver names no credential files, so a bundle of its
// workers would carry nothing.
var errNoLayout = fmt.Errorf("this kind of worker keeps no login in its work dir: %w", ErrNoCredentials)

// spec is the credential layout of the account's kind.
func (s *Service) spec(account string) Spec {
	if s.cfg.SpecFor != nil {
		return s.cfg.SpecFor(account)
	}
	return s.cfg.Spec
}

// Enabled reports whether a bundle key is configured.
func (s *Service) Enabled() bool { return len(s.cfg.Key) > 0 }

// home finds the named instance.
func (s *Service) home(instance string) (Home, error) {
	if s.instances == nil {
		return Home{}, fmt.Errorf("instance %s: this service serves no instances", instance)
	}
	return s.instances.Home(instance)
}

// Export seals the named instance's credentials and also saves the bundle
// in the store. Errors: ErrNoKey, supervisor.ErrUnknownInstance,
// ErrNoCredentials (the instance is not logged in).
func (s *Service) Export(ctx context.Context, instance string) (account string, sealed []byte, err error) {
	if !s.Enabled() {
		return "", nil, ErrNoKey
	}
	h, err := s.home(instance)
	if err != nil {
		return "", nil, err
	}
	spec := s.spec(h.Account)
	if spec.Dir == "" {
		return "", nil, errNoLayout
	}
	if h.LoggedOut {
		return "", nil, fmt.Errorf("instance %s is needs_login: %w", instance, ErrNoCredentials)
	}
	s.mu.Lock()
	sealed, m, err := Pack(h.WorkDir, spec, h.Account, s.cfg.Key, s.cfg.Now())
	s.mu.Unlock()
	if err != nil {
		return "", nil, fmt.Errorf("export instance %s: %w", instance, err)
	}
	s.save(ctx, h.Account, sealed, m.CreatedAt)
	return h.Account, sealed, nil
}

// ExportPlain packs the named instance's credential files unsealed (see
// PackPlain), for the Python gateway to take back; it needs no key and
// saves nothing. Whether a caller may have the credentials in the clear is
// the caller's decision (an admin, with the export allowed by a setting).
// Errors: supervisor.ErrUnknownInstance, ErrNoCredentials.
func (s *Service) ExportPlain(_ context.Context, instance string) (Home, []byte, error) {
	h, err := s.home(instance)
	if err != nil {
		return Home{}, nil, err
	}
	spec := s.spec(h.Account)
	if spec.Dir == "" {
		return Home{}, nil, errNoLayout
	}
	if h.LoggedOut {
		return Home{}, nil, fmt.Errorf("instance %s is needs_login: %w", instance, ErrNoCredentials)
	}
	s.mu.Lock()
	payload, err := PackPlain(h.WorkDir, spec, s.cfg.Now())
	s.mu.Unlock()
	if err != nil {
		return Home{}, nil, fmt.Errorf("export instance %s: %w", instance, err)
	}
	return h, payload, nil
}

// Import verifies sealed completely, installs it into the named instance's
// work dir, restarts the instance and saves the bundle in the store. A
// bundle that fails any check leaves the work dir and the worker alone.
// Errors: ErrNoKey, supervisor.ErrUnknownInstance, ErrSeal,
// ErrChecksum, ErrMalformed, ErrWrongAccount.
func (s *Service) Import(ctx context.Context, instance string, sealed []byte) error {
	if !s.Enabled() {
		return ErrNoKey
	}
	h, err := s.home(instance)
	if err != nil {
		return err
	}
	spec := s.spec(h.Account)
	if spec.Dir == "" {
		return errNoLayout
	}
	b, err := Open(sealed, s.cfg.Key, spec, s.cfg.Limits)
	if err != nil {
		return fmt.Errorf("import into instance %s: %w", instance, err)
	}
	if b.Manifest.Account != h.Account {
		return fmt.Errorf("import into instance %s: the bundle is for account %q, the instance runs %q: %w",
			instance, b.Manifest.Account, h.Account, ErrWrongAccount)
	}
	if err := s.install(instance, b, h.WorkDir); err != nil {
		return err
	}
	s.save(ctx, h.Account, sealed, b.Manifest.CreatedAt)
	return nil
}

// ImportPlain installs an unsealed bundle (a base64-decoded tar.gz of a
// whole work dir, as the Python gateway exported it) into the named
// instance's work dir and restarts it. account is the account the exporter
// named, which must be the instance's account name or username: a plain
// bundle carries no proof of whose it is, so one that names no account is
// refused (ErrNoAccount), never installed into whichever instance it was
// sent to. The credential files get the sealed format's checks, and
// nothing is written unless all pass; once the worker confirms its login,
// the Ready hook saves them sealed (with a key). Errors:
// supervisor.ErrUnknownInstance, ErrMalformed, ErrWrongAccount,
// ErrNoAccount.
func (s *Service) ImportPlain(_ context.Context, instance, account string, payload io.Reader) error {
	h, err := s.home(instance)
	if err != nil {
		return err
	}
	spec := s.spec(h.Account)
	if spec.Dir == "" {
		return errNoLayout
	}
	if account == "" {
		return fmt.Errorf("import into instance %s: %w", instance, ErrNoAccount)
	}
	if account != h.Account && account != h.Username {
		return fmt.Errorf("import into instance %s: the bundle is for account %q, the instance runs %q: %w",
			instance, account, h.Account, ErrWrongAccount)
	}
	b, err := OpenPlainReader(payload, spec, s.cfg.Limits, h.Account, s.cfg.Now())
	if err != nil {
		return fmt.Errorf("import into instance %s: %w", instance, err)
	}
	return s.install(instance, b, h.WorkDir) // the store gets the sealed bundle from the Ready hook, under the lease
}

// install puts a verified bundle into the instance's work dir and restarts
// the instance on it.
func (s *Service) install(instance string, b *Bundle, workDir string) error {
	s.mu.Lock()
	err := b.Install(workDir)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("import into instance %s: %w", instance, err)
	}
	if err := s.instances.Restart(instance); err != nil {
		return fmt.Errorf("import into instance %s: installed, but restart: %w", instance, err)
	}
	return nil
}

// save stores a bundle; a store failure costs other replicas the bundle but
// not this call, so it is logged (the store counts it too).
func (s *Service) save(ctx context.Context, account string, sealed []byte, created time.Time) {
	if err := s.store(ctx, account, sealed, created); err != nil {
		s.log.Warn("session bundle not saved in the store", "account", account, "err", err)
	}
}

// errNotHolder: this replica holds no lease on the account, so a bundle it
// made could overwrite the holder's.
var errNotHolder = errors.New("this replica does not hold the account's lease")

// store saves a bundle under this replica's lease token.
func (s *Service) store(ctx context.Context, account string, sealed []byte, created time.Time) error {
	if s.storage == nil {
		return nil
	}
	v := Version{Created: created}
	if s.cfg.Token != nil {
		tok, ok := s.cfg.Token(account)
		if !ok {
			return errNotHolder
		}
		v.Token = tok
	}
	return s.storage.SaveBundle(ctx, account, sealed, v)
}

// warnNoKey says once that bundles are off.
func (s *Service) warnNoKey() {
	s.noKey.Do(func() {
		s.log.Warn("POOLGATE_BUNDLE_KEY is not set: session bundles are neither saved after a login nor restored before a start")
	})
}

// Saved packs account's credentials from workDir after a successful login
// and saves the sealed bundle in the store, so another replica or a wiped
// disk can start the account without a login. Without a key it does nothing.
func (s *Service) Saved(ctx context.Context, account, workDir string) error {
	if !s.Enabled() {
		s.warnNoKey()
		return nil
	}
	spec := s.spec(account)
	if spec.Dir == "" {
		return nil
	}
	s.mu.Lock()
	sealed, m, err := Pack(workDir, spec, account, s.cfg.Key, s.cfg.Now())
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("save session bundle of %s: %w", account, err)
	}
	if err := s.store(ctx, account, sealed, m.CreatedAt); err != nil {
		return fmt.Errorf("save session bundle of %s: %w", account, err)
	}
	s.log.Info("session bundle saved", "account", account, "bytes", len(sealed), "expires_at", m.ExpiresAt)
	return nil
}

// candidate is one bundle Restore may install.
type candidate struct {
	from   string
	bundle *Bundle
}

// Restore runs before a worker starts: when workDir has no credentials it
// installs account's newest valid bundle, from the store or from the
// account's config, and reports whether it did. Bundles that do not open
// (another key, corrupt) or have expired are skipped with a warning; the
// error is non-nil only when a bundle was found and none could be used, or
// the install failed. The worker should start either way (it will then
// need a login). Without a key it does nothing.
func (s *Service) Restore(ctx context.Context, account, workDir string) (bool, error) {
	if !s.Enabled() {
		s.warnNoKey()
		return false, nil
	}
	spec := s.spec(account)
	if spec.Dir == "" || HasCredentials(workDir, spec) {
		return false, nil
	}
	var cands []candidate
	var problems []error
	consider := func(from string, sealed []byte) {
		b, err := Open(sealed, s.cfg.Key, spec, s.cfg.Limits)
		if err == nil {
			if exp := b.Manifest.ExpiresAt; exp != nil && !s.cfg.Now().Before(*exp) {
				err = fmt.Errorf("expired at %s", exp.Format(time.RFC3339))
			}
		}
		if err != nil {
			s.log.Warn("session bundle not usable", "account", account, "from", from, "err", err)
			problems = append(problems, fmt.Errorf("bundle from %s: %w", from, err))
			return
		}
		if b.Manifest.Account != account {
			// Another account's credentials would run under this one's name.
			err := fmt.Errorf("made for account %q: %w", b.Manifest.Account, ErrWrongAccount)
			s.log.Warn("session bundle not usable", "account", account, "from", from, "err", err)
			problems = append(problems, fmt.Errorf("bundle from %s: %w", from, err))
			return
		}
		cands = append(cands, candidate{from: from, bundle: b})
	}
	if s.storage != nil {
		sealed, err := s.storage.LoadBundle(ctx, account)
		switch {
		case err == nil:
			consider("store", sealed)
		case !errors.Is(err, ErrNotFound):
			s.log.Warn("session store did not answer for the bundle", "account", account, "err", err)
		}
	}
	if sealed, ok := s.configuredFor(account); ok {
		consider("config", sealed)
	}
	if len(cands) == 0 {
		return false, errors.Join(problems...)
	}
	best := cands[0]
	for _, c := range cands[1:] {
		if c.bundle.Manifest.CreatedAt.After(best.bundle.Manifest.CreatedAt) {
			best = c
		}
	}
	s.mu.Lock()
	err := best.bundle.Install(workDir)
	s.mu.Unlock()
	if err != nil {
		return false, fmt.Errorf("restore session bundle of %s: %w", account, err)
	}
	s.log.Info("session bundle restored", "account", account, "from", best.from,
		"created_at", best.bundle.Manifest.CreatedAt, "expires_at", best.bundle.Manifest.ExpiresAt)
	return true, nil
}
