package admin

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/internal/live"
)

// RegisterLive adds GET /live to the /internal group: the last hour of
// traffic the dashboard draws, as one series (the whole gateway's, or with
// ?account= one account's) and every account's summary over ?window=
// (default 5m, at most 1h).
func (a *Admin) RegisterLive(r gin.IRouter, rec *live.Recorder) {
	r.GET("/live", func(c *gin.Context) {
		window := 5 * time.Minute
		if w := c.Query("window"); w != "" {
			d, err := time.ParseDuration(w)
			if err != nil || d <= 0 || d > time.Hour {
				writeError(c, http.StatusBadRequest, CodeBadRequest, "window must be a duration from 1s to 1h, like 5m")
				return
			}
			window = d
		}
		c.JSON(http.StatusOK, rec.View(time.Now(), c.Query("account"), window))
	})
}
