package httpx

import (
	"context"
	"encoding/json"
	"log/slog"
)

// Dropped collects the request fields a decoder accepted but could not
// honour (a thinking budget, a caching hint, a hosted tool). Coding agents
// send such fields on every turn; answering them with a 400 would end the
// user's session, so they are dropped, and each drop is made visible: a
// debug log line and a counter per field. Field names are constants of the
// protocol packages, never taken from the request, so the counter's labels
// stay bounded.
type Dropped struct {
	fields []string
}

// Add records that field was dropped (once per request, however often).
func (d *Dropped) Add(field string) {
	for _, f := range d.fields {
		if f == field {
			return
		}
	}
	d.fields = append(d.fields, field)
}

// AddSet records field as dropped when raw holds a value (not absent, not
// null): the decoders keep such fields as raw JSON only to notice them.
func (d *Dropped) AddSet(field string, raw json.RawMessage) {
	if len(raw) > 0 && string(raw) != "null" {
		d.Add(field)
	}
}

// Fields returns the dropped fields in the order first seen.
func (d *Dropped) Fields() []string { return d.fields }

// FieldCounter counts a dropped field of a protocol; the metrics package's
// counter satisfies it through a small adapter in the daemon. nil counts nothing.
type FieldCounter func(protocol, field string)

// Report logs the dropped fields at debug level and counts each one.
func (d *Dropped) Report(ctx context.Context, log *slog.Logger, count FieldCounter, protocol string) {
	if len(d.fields) == 0 {
		return
	}
	if count != nil {
		for _, f := range d.fields {
			count(protocol, f)
		}
	}
	if log != nil && log.Enabled(ctx, slog.LevelDebug) {
		log.LogAttrs(ctx, slog.LevelDebug, "request fields dropped",
			slog.String("request_id", RequestID(ctx)), slog.String("protocol", protocol),
			slog.Any("fields", d.fields))
	}
}
