package handlers

import (
	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/gemini"
)

// geminiRoutes are the Gemini API's routes. Its paths put the method after
// a colon in the last segment (models/gemini-2.5-pro:generateContent),
// which gin cannot route on, so one catch-all under models/ takes them and
// the method is read here.
type geminiRoutes struct {
	generate, count gin.HandlerFunc
	models          ModelLister
}

// post serves POST .../models/{model}:{method}.
func (g geminiRoutes) post(c *gin.Context) {
	a, ok := gemini.ParseAction(c.Request.URL.Path)
	switch {
	case ok && (a.Method == gemini.MethodGenerate || a.Method == gemini.MethodStream):
		g.generate(c)
	case ok && a.Method == gemini.MethodCount:
		g.count(c)
	default:
		notFound(c)
	}
}

// list serves GET /v1beta/models.
func (g geminiRoutes) list(c *gin.Context) { gemini.WriteModels(c.Writer, g.models.Models()) }

// model serves GET .../models/{model}: Gemini's model under /v1beta and for
// Google's clients on /v1; OpenAI's model object for anyone else on /v1
// (GET /v1/models/{id} is OpenAI's models.retrieve too).
func (g geminiRoutes) model(c *gin.Context) {
	ms, name := g.models.Models(), c.Param("name")
	if gemini.IsRequest(c.Request) {
		gemini.WriteModel(c.Writer, ms, name)
		return
	}
	writeOpenAIModel(c, ms, name[1:])
}
