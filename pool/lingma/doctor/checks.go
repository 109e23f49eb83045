package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/pool/lingma"
)

// The file the tool check asks the worker to read, in its workspace.
const (
	checkFile = "doctor-check.txt"
	checkLine = "poolgate doctor was here"
)

// checks runs every check after the worker started.
func (r *run) checks(ctx context.Context, tp *tape) {
	if !r.started(ctx) {
		return
	}
	r.bareJSON(ctx)
	c, err := lingmarpc.Dial(ctx, r.ep.Port, lingmarpc.ConnConfig{Tap: tp.record})
	if err != nil {
		r.add("initialize", Differs, "could not connect again: %v", err)
		return
	}
	defer c.Close()
	if !r.initialize(ctx, c) {
		return
	}
	r.listeners()
	loggedIn := r.status(ctx, c)
	r.models(ctx, c, loggedIn)
	if !loggedIn {
		r.refusal(ctx, c)
		for _, check := range []string{"ask mode normal", "ask mode chat", "chat/ask reply", "chat/finish",
			"worker requests", "reuse", "tool/invoke", "chat/stop"} {
			r.add(check, NotChecked, "the worker is not logged in: give a logged-in work dir (--work-dir)")
		}
		return
	}
	r.turns(ctx, c)
}

// started waits for the worker's socket, failing fast if it exits: a worker
// that refuses its start flags exits.
func (r *run) started(ctx context.Context) bool {
	deadline := time.Now().Add(r.cfg.StartTimeout)
	for {
		c, err := lingmarpc.Dial(ctx, r.ep.Port, lingmarpc.ConnConfig{})
		if err == nil {
			c.Close()
			r.add("start flags", Holds, "listening on the socket port it was given")
			return true
		}
		select {
		case <-r.proc.Exited():
			r.add("start flags", Differs, "exited before listening (%v); its last lines:\n%s", r.proc.Wait(), r.output.last())
			return false
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.add("start flags", Differs, "not listening on %d within %s; its last lines:\n%s", r.ep.Port,
				r.cfg.StartTimeout, r.output.last())
			return false
		}
	}
}

// bareJSON: the worker refuses a message without its Content-Length frame.
func (r *run) bareJSON(ctx context.Context) {
	c, err := lingmarpc.Dial(ctx, r.ep.Port, lingmarpc.ConnConfig{})
	if err != nil {
		r.add("bare JSON refused", NotChecked, "could not connect: %v", err)
		return
	}
	defer c.Close()
	frame, answer, err := c.Frame("initialize", struct{}{})
	body, _, _ := lingmarpc.Split(frame)
	if err == nil {
		err = c.Raw(body) // the message alone, without its frame
	}
	if err != nil {
		r.add("bare JSON refused", NotChecked, "could not send: %v", err)
		return
	}
	select {
	case <-time.After(1500 * time.Millisecond):
		r.add("bare JSON refused", Holds, "no answer")
	case <-answer:
		r.add("bare JSON refused", Differs, "the worker answered a message without its Content-Length header")
	case m := <-c.In:
		r.add("bare JSON refused", Differs, "the worker sent %s", m.Method)
	case <-c.Done():
		r.add("bare JSON refused", Holds, "the worker closed the connection")
	}
}

func (r *run) initialize(ctx context.Context, c *lingmarpc.Conn) bool {
	root := "file://" + filepath.ToSlash(r.ep.WorkDir)
	m, err := c.Call(ctx, 10*time.Second, "initialize", map[string]any{"processId": nil,
		"clientInfo": map[string]string{"name": "poolgate-doctor", "version": "1"}, "rootUri": root, "capabilities": map[string]any{},
		"workspaceFolders": []any{map[string]string{"uri": root, "name": filepath.Base(r.ep.WorkDir)}}})
	switch {
	case err != nil:
		r.add("initialize", Differs, "%v", err)
		return false
	case m.Error != nil:
		r.add("initialize", Differs, "answered with an error: %v", m.Error)
		return false
	}
	var res struct {
		ServerInfo struct{ Name, Version string } `json:"serverInfo"`
	}
	_ = json.Unmarshal(m.Result, &res)
	r.add("initialize", Holds, "serverInfo %s %s", res.ServerInfo.Name, res.ServerInfo.Version)
	return true
}

// listeners: the worker listens on the two ports its flags give and keeps
// its Unix sockets under its work dir (its home is there).
func (r *run) listeners() {
	got, err := listening(r.proc.Pid())
	if err != nil {
		r.add("listeners", NotChecked, "%v", err)
		return
	}
	var extra []string
	for _, p := range got.ports {
		if p != r.ep.Port && p != r.ep.AuxPort {
			extra = append(extra, fmt.Sprintf("port %d", p))
		}
	}
	for _, u := range got.unix {
		if !strings.HasPrefix(u, r.ep.WorkDir) {
			extra = append(extra, "Unix socket "+u)
		}
	}
	if len(extra) > 0 {
		r.add("listeners", Differs, "also %s, which no start flag moves: two workers on one host may collide there",
			strings.Join(extra, ", "))
		return
	}
	r.add("listeners", Holds, "ports %v, Unix sockets %v", got.ports, got.unix)
}

// status: auth/status says logged in with status 2 and an id, or logged
// out with status 1.
func (r *run) status(ctx context.Context, c *lingmarpc.Conn) bool {
	m, err := c.Call(ctx, 10*time.Second, "auth/status", map[string]any{})
	if err != nil || m.Error != nil {
		r.add("auth/status", Differs, "%v %v", err, m.Error)
		return false
	}
	var st struct {
		Status json.Number `json:"status"`
		ID     string      `json:"id"`
	}
	_ = json.Unmarshal(m.Result, &st)
	switch {
	case st.Status == "2" && st.ID != "":
		r.add("auth/status", Holds, "logged in: status 2 with an id")
		return true
	case st.Status == "1":
		r.add("auth/status", Holds, "logged out: status 1")
	default:
		r.add("auth/status", Differs, "neither status 2 with an id nor status 1: %s", lingmarpc.Redact(m.Result, "auth/status", false))
	}
	return false
}

// models: config/queryModels maps scenes to lists of {key, ...}; {} while
// logged out.
func (r *run) models(ctx context.Context, c *lingmarpc.Conn, loggedIn bool) {
	m, err := c.Call(ctx, 10*time.Second, "config/queryModels", map[string]any{})
	if err != nil || m.Error != nil {
		r.add("config/queryModels", Differs, "%v %v", err, m.Error)
		return
	}
	var scenes map[string][]struct {
		Key string `json:"key"`
	}
	if json.Unmarshal(m.Result, &scenes) != nil {
		r.add("config/queryModels", Differs, "not a map of scenes to model lists: %.200s", m.Result)
		return
	}
	keys := map[string]bool{}
	for _, l := range scenes {
		for _, e := range l {
			keys[e.Key] = e.Key != ""
		}
	}
	if loggedIn && len(keys) == 0 {
		r.add("config/queryModels", Differs, "no model while logged in: %.200s", m.Result)
		return
	}
	r.add("config/queryModels", Holds, "%d scenes, %d model keys", len(scenes), len(keys))
}

// refusal: a logged-out worker refuses a turn in the reply's shape, with a
// text lingma.login_text matches.
func (r *run) refusal(ctx context.Context, c *lingmarpc.Conn) {
	s := r.turn(ctx, c, plain("Reply with exactly: pong"), turnOpts{drv: r.driver(lingma.Config{})})
	login := regexp.MustCompile(lingmarpc.DefaultLoginText)
	msg, _ := s.reply["errorMessage"].(string)
	switch {
	case s.accepted():
		r.add("refusal while logged out", Differs, "chat/ask was accepted while auth/status says logged out")
	case s.reply == nil || msg == "":
		r.add("refusal while logged out", Differs, "not {success: false, errorMessage}: %s", s.refusal())
	case !login.MatchString(msg):
		r.add("refusal while logged out", Differs, "%q, which lingma.login_text's default does not match: set it", msg)
	default:
		r.add("refusal while logged out", Holds, "%q", msg)
	}
}

// driver is a driver for the checks' asks.
func (r *run) driver(cfg lingma.Config) *lingma.Driver {
	cfg.Command = r.cfg.Command
	return lingma.New(cfg)
}

func plain(text string) *chat.Turn {
	return &chat.Turn{Messages: []chat.Message{{Role: chat.RoleUser, Content: text}}}
}

// sorted lists the distinct names in l.
func sorted(l []string) []string {
	out := slices.Clone(l)
	slices.Sort(out)
	return slices.Compact(out)
}
