package config

import (
	"fmt"
	"regexp"
	"strings"
)

// lingmaErrors checks the settings of the Lingma driver.
func (c *Config) lingmaErrors() []error {
	var errs []error
	switch c.LingmaAskMode {
	case "chat", "agent":
	default:
		errs = append(errs, fmt.Errorf("lingma_ask_mode %q: use chat or agent", c.LingmaAskMode))
	}
	switch c.LingmaToolMode {
	case "emulated", "native", "auto":
	default:
		errs = append(errs, fmt.Errorf("lingma_tool_mode %q: use emulated, native or auto", c.LingmaToolMode))
	}
	if u := c.LingmaDedicatedDomain; u != "" && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		errs = append(errs, fmt.Errorf("lingma_dedicated_domain %q: an http(s) URL", u))
	}
	for k, v := range map[string]string{"lingma_ratelimit_text": c.LingmaRateLimitText, "lingma_login_text": c.LingmaLoginText} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is empty: give a regular expression (an empty one would match every error)", k))
		} else if _, err := regexp.Compile(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
		}
	}
	return errs
}
