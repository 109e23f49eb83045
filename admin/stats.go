package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	dto "github.com/prometheus/client_model/go"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// ModelSource lists one instance's models live.
type ModelSource interface {
	InstanceModels(ctx context.Context, name string) (raw json.RawMessage, models []chat.Model, err error)
}

// Limits are the admission limits /internal/stats reports beside the load.
type Limits struct {
	MaxInFlight int `json:"max_in_flight"`
	MaxQueue    int `json:"max_queue"`
}

// rawModels is the answer of /internal/models/raw: poolgate's parsed list
// and the worker's own answer, with the Python gateway's keys beside them.
type rawModels struct {
	Instance string `json:"instance"`
	// Picked: the request named no instance, so this one was picked.
	Picked bool            `json:"picked,omitempty"`
	Models []chat.Model    `json:"models"`
	Raw    json.RawMessage `json:"raw"`
	// ExtractedNameMap (model key -> display name) and ExposedKeys (the
	// keys /v1/models lists) are the Python gateway's names for the same.
	ExtractedNameMap map[string]string `json:"extracted_name_map"`
	ExposedKeys      []string          `json:"exposed_keys"`
}

// RegisterStats adds /stats and /models/raw to the /internal group.
func (a *Admin) RegisterStats(r gin.IRouter, limits Limits, models ModelSource) {
	r.GET("/stats", func(c *gin.Context) { c.JSON(http.StatusOK, a.stats(limits)) })
	r.GET("/models/raw", func(c *gin.Context) {
		name, picked := instanceParam(c), pickedInstance(c)
		ctx, cancel := context.WithTimeout(c.Request.Context(), 5*time.Second)
		defer cancel()
		raw, ms, err := models.InstanceModels(ctx, name)
		switch {
		case errors.Is(err, supervisor.ErrUnknownInstance):
			writeError(c, http.StatusNotFound, CodeUnknownInstance, "unknown instance "+name)
		case errors.Is(err, chat.ErrNoInstance):
			writeError(c, http.StatusConflict, CodeNotRunning, "instance "+name+" is not running")
		case err != nil:
			writeError(c, http.StatusBadGateway, CodeWorkerError, "list models on "+name+": "+err.Error())
		default:
			if raw == nil {
				raw = json.RawMessage("null")
			}
			ans := rawModels{Instance: name, Picked: picked, Models: ms, Raw: raw,
				ExtractedNameMap: make(map[string]string, len(ms)), ExposedKeys: make([]string, 0, len(ms))}
			if ans.Models == nil {
				ans.Models = []chat.Model{}
			}
			for _, m := range ms {
				ans.ExtractedNameMap[m.ID] = m.Name
				ans.ExposedKeys = append(ans.ExposedKeys, m.ID)
			}
			c.JSON(http.StatusOK, ans)
		}
	})
}

// stats summarises the registry's counters: the numbers /metrics exports,
// in one JSON object for people and the dashboard.
func (a *Admin) stats(limits Limits) gin.H {
	families, err := a.reg.Gather()
	if err != nil {
		a.log.Warn("gather metrics for stats", "err", err)
	}
	sum := map[string]float64{}
	byLabel := map[string]map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			v := value(m)
			sum[f.GetName()] += v
			for _, l := range m.GetLabel() {
				key := f.GetName() + "/" + l.GetName()
				if byLabel[key] == nil {
					byLabel[key] = map[string]float64{}
				}
				byLabel[key][l.GetValue()] += v
			}
		}
	}
	hits, misses := sum["poolgate_session_cache_hits_total"], sum["poolgate_session_cache_misses_total"]
	rate := 0.0
	if hits+misses > 0 {
		rate = hits / (hits + misses)
	}
	snap := a.pool.Snapshot()
	return gin.H{
		"ok":        true, // the Python gateway's scripts check it
		"simulated": a.cfg.Simulated,
		"requests": gin.H{"total": sum["poolgate_requests_total"], "by_api": byLabel["poolgate_requests_total/api"],
			"by_code": byLabel["poolgate_requests_total/code"]},
		"tokens": gin.H{"input": byLabel["poolgate_tokens_total/direction"]["input"],
			"output": byLabel["poolgate_tokens_total/direction"]["output"]},
		"cache": gin.H{"hits": hits, "misses": misses, "hit_rate": rate,
			"invalidations": sum["poolgate_session_cache_invalidations_total"]},
		"concurrency": gin.H{"in_flight": snap.InFlight, "queue_depth": snap.Waiting,
			"max_in_flight": limits.MaxInFlight, "max_queue": limits.MaxQueue},
		"backpressure_rejections": sum["poolgate_backpressure_rejections_total"],
		"retries":                 sum["poolgate_retries_total"],
		"cooldowns":               sum["poolgate_cooldowns_total"],
		"pool":                    snap.Instances,
	}
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}
