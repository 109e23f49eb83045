package admin

import (
	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
)

// Edge is the HTTP edge's authorization as the daemon puts it in front of the
// admin routes: adminToken is the admin token ("" = none), keys the API
// keys in force (none: an open gateway, whose callers are its admins).
func Edge(adminToken string, keys ...apikey.Key) gin.HandlerFunc {
	return handlers.Authorize(&access.Credentials{Keys: apikey.NewRegistry(keys), AdminToken: adminToken}, WriteError)
}
