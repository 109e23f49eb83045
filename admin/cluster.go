package admin

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/pool/cluster"
)

// ClusterView is this replica's picture of the cluster.
type ClusterView interface {
	Status() cluster.Status
}

// RegisterCluster adds GET /cluster to the /internal group: the replicas
// (id, address, accounts held, load) and every account's lease.
func (a *Admin) RegisterCluster(r gin.IRouter, view ClusterView) {
	r.GET("/cluster", func(ctx *gin.Context) { ctx.JSON(http.StatusOK, view.Status()) })
}
