package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/poolgate/poolgate/internal/redact"
)

// lingmaErrors checks the settings of the Lingma driver.
func (c *Config) lingmaErrors() []error {
	var errs []error
	switch c.LingmaAskMode {
	case "normal", "chat", "agent":
	default:
		errs = append(errs, fmt.Errorf("lingma_ask_mode %q: use normal, chat or agent", c.LingmaAskMode))
	}
	switch c.LingmaAgentSession {
	case "chat", "assistant", "developer", "inline":
	default:
		errs = append(errs, fmt.Errorf("lingma_agent_session %q: use chat, assistant, developer or inline", c.LingmaAgentSession))
	}
	switch c.LingmaReuse {
	case "controlled", "chat-only":
	default:
		errs = append(errs, fmt.Errorf("lingma_reuse %q: use controlled or chat-only", c.LingmaReuse))
	}
	switch c.LingmaChatContext {
	case "none", "prompt":
	default:
		errs = append(errs, fmt.Errorf("lingma_chat_context %q: use none or prompt", c.LingmaChatContext))
	}
	switch c.LingmaToolMode {
	case "emulated", "native", "auto":
	default:
		errs = append(errs, fmt.Errorf("lingma_tool_mode %q: use emulated, native or auto", c.LingmaToolMode))
	}
	if u := c.LingmaDedicatedDomain; u != "" && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		errs = append(errs, fmt.Errorf("lingma_dedicated_domain %q: an http(s) URL", redact.URL(u)))
	}
	if c.LingmaRecordBytes < 4096 {
		errs = append(errs, fmt.Errorf("lingma_record_bytes %d: at least 4096", c.LingmaRecordBytes))
	}
	if c.LingmaRecordKeep < 1 {
		errs = append(errs, fmt.Errorf("lingma_record_keep %d: at least 1", c.LingmaRecordKeep))
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
