package testenv

import (
	"testing"
)

func TestRedisKillRestart(t *testing.T) {
	s := Redis(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after start: %v", err)
	}
	s.Kill()
	if err := ping(s.Addr()); err == nil {
		t.Fatalf("ping after Kill succeeded, want an error")
	}
	s.Restart()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after Restart: %v", err)
	}
}

func TestFreePort(t *testing.T) {
	if p := FreePort(t); p <= 0 || p > 65535 {
		t.Errorf("FreePort() = %d, want a port in 1..65535", p)
	}
}

func TestRedisURL(t *testing.T) {
	s := Redis(t)
	if got, want := s.URL(), "redis://"+s.Addr()+"/0"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
}
