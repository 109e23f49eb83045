package redact_test

import (
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/redact"
)

func TestURL(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "no secrets", give: "redis://redis:6379/0", want: "redis://redis:6379/0"},
		{name: "password", give: "redis://:s3cret@redis:6379/0", want: "redis://REDACTED@redis:6379/0"},
		{name: "user and password", give: "rediss://app:s3cret@redis:6380", want: "rediss://REDACTED@redis:6380"},
		{name: "a bare percent in the password", give: "redis://:p%zz9@redis:6379/0", want: "redis://REDACTED@redis:6379/0"},
		{name: "a bare slash and at in the password", give: "redis://:a/b@c@redis:6379", want: "redis://REDACTED@redis:6379"},
		{name: "a bare hash in the password", give: "redis://:a#b@redis:6379", want: "redis://REDACTED@redis:6379"},
		{name: "no scheme", give: "user:pw@redis:6379", want: "REDACTED@redis:6379"},
		{name: "sentinel's primary password",
			give: "redis://s1:26379/0?master_name=m&password=pw&addr=s2:26379",
			want: "redis://s1:26379/0?master_name=m&password=REDACTED&addr=s2:26379"},
		{name: "a bare ampersand in a password parameter",
			give: "redis://s1:26379?password=ab&cd&master_name=m",
			want: "redis://s1:26379?password=REDACTED&master_name=m"},
		{name: "a hash in a password parameter", give: "redis://s1?password=a#b&x=1", want: "redis://s1?password=REDACTED&x=1"},
		{name: "both", give: "redis://u:p@s1?sentinel_password=q", want: "redis://REDACTED@s1?sentinel_password=REDACTED"},
		{name: "a token in an endpoint", give: "https://c.example/v1?api_key=k&x=1", want: "https://c.example/v1?api_key=REDACTED&x=1"},
		{name: "empty", give: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redact.URL(tt.give); got != tt.want {
				t.Errorf("URL(%q) = %q, want %q", tt.give, got, tt.want)
			}
			for _, secret := range []string{"s3cret", "p%zz9", "pw", "cd", "a#b", "a/b"} {
				if strings.Contains(tt.give, secret) && strings.Contains(redact.URL(tt.give), secret) {
					t.Errorf("URL(%q) keeps %q", tt.give, secret)
				}
			}
		})
	}
}
