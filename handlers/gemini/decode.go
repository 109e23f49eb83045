package gemini

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// Fields this protocol accepts but drops, as counted in
// poolgate_request_fields_ignored_total{protocol="gemini"}.
const (
	dropThinkingConfig   = "generationConfig.thinkingConfig"
	dropSafetySettings   = "safetySettings"
	dropThoughts         = "content.thought"
	dropThoughtSignature = "content.thoughtSignature"
	dropInlineData       = "content.inlineData"
	dropFileData         = "content.fileData"
	dropCodeExecution    = "content.codeExecution"
	dropRepeatedResult   = "content.functionResponse.repeated"
	dropHostedTools      = "tools.hosted"
)

// DroppedFields lists every field name the Gemini decoder may report as
// dropped, so the counter can be pre-initialised.
var DroppedFields = []string{
	dropThinkingConfig, dropSafetySettings, dropThoughts, dropThoughtSignature, dropInlineData, dropFileData,
	dropCodeExecution, dropRepeatedResult, dropHostedTools,
}

// decoded is a validated request: the neutral request and the fields that
// were dropped on the way.
type decoded struct {
	chat    chat.Request
	dropped httpx.Dropped
	// toolAt is the wire path of each neutral tool
	// ("tools[0].functionDeclarations[2]"), for the errors that name one.
	toolAt []string
}

// decodeGenerate parses the body of generateContent (or its streamed
// twin) for model, the model the path names, into the neutral model and
// validates it.
func decodeGenerate(body []byte, model string, stream bool) (*decoded, error) {
	var in generateRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, apierr.BadRequest("invalid JSON body: %v", err)
	}
	d, err := decodeRequest(&in, model)
	if err != nil {
		return nil, err
	}
	d.chat.Stream = stream
	return d, nil
}

// decodeCount parses the body of countTokens: the contents alone, or a
// whole generateContentRequest, counted as its turn would be.
func decodeCount(body []byte, model string) (*decoded, error) {
	var in countRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, apierr.BadRequest("invalid JSON body: %v", err)
	}
	g := in.GenerateContentRequest
	if g == nil {
		g = in.GenerateContentRequest_
	}
	if g == nil {
		g = &generateRequest{Contents: in.Contents}
	} else if len(in.Contents) > 0 {
		return nil, apierr.BadRequest("contents and generateContentRequest are mutually exclusive")
	}
	return decodeRequest(g, model)
}

// decodeRequest translates one generate request.
func decodeRequest(in *generateRequest, model string) (*decoded, error) {
	in.merge()
	if model == "" {
		return nil, apierr.BadRequest("the path names no model: use models/{model}:generateContent")
	}
	if in.CachedContent != "" {
		return nil, apierr.BadRequest("cachedContent: cached contents are not supported by this gateway (it keeps no server-side caches)")
	}
	d := &decoded{}
	out := &d.chat
	out.Model = model
	d.dropped.AddSet(dropSafetySettings, in.SafetySettings)
	if err := d.generation(in.GenerationConfig); err != nil {
		return nil, err
	}
	if in.SystemInstruction != nil {
		sys, err := systemText(in.SystemInstruction)
		if err != nil {
			return nil, err
		}
		if sys != "" {
			out.Messages = append(out.Messages, chat.Message{Role: chat.RoleSystem, Content: sys})
		}
	}
	var err error
	if out.Messages, err = decodeContents(out.Messages, in.Contents, &d.dropped); err != nil {
		return nil, err
	}
	if out.Tools, d.toolAt, err = decodeTools(in.Tools, &d.dropped); err != nil {
		return nil, err
	}
	if err := d.toolConfig(in.ToolConfig); err != nil {
		return nil, err
	}
	// A JSON answer is what Gemini CLI's side requests ask for (its model
	// router's classification, its next-speaker check): they quote the
	// conversation without continuing it.
	out.OneShot = out.Format.JSON
	if err := apierr.Validate(out, d.param); err != nil {
		return nil, err
	}
	return d, nil
}

// merge folds the snake_case spellings into the camelCase fields.
func (in *generateRequest) merge() {
	in.SystemInstruction = cmp.Or(in.SystemInstruction, in.SystemInstruction_)
	in.ToolConfig = cmp.Or(in.ToolConfig, in.ToolConfig_)
	in.GenerationConfig = cmp.Or(in.GenerationConfig, in.GenerationConfig_)
	orRaw(&in.SafetySettings, in.SafetySettings_)
	in.CachedContent = cmp.Or(in.CachedContent, in.CachedContent_)
}

// param is this protocol's name for a neutral field.
func (d *decoded) param(ve *chat.ValidationError) string {
	switch ve.Field {
	case "tools":
		if ve.Index >= 0 && ve.Index < len(d.toolAt) {
			if ve.Member != "" {
				return d.toolAt[ve.Index] + "." + ve.Member
			}
			return d.toolAt[ve.Index]
		}
		return "tools"
	case "stop":
		if ve.Index >= 0 {
			return fmt.Sprintf("generationConfig.stopSequences[%d]", ve.Index)
		}
		return "generationConfig.stopSequences"
	case "tool_choice":
		return "toolConfig.functionCallingConfig"
	case "top_p":
		return "generationConfig.topP"
	case "top_k":
		return "generationConfig.topK"
	case "max_tokens":
		return "generationConfig.maxOutputTokens"
	}
	return "contents"
}

// generation reads generationConfig: the sampling values, the stop
// sequences, the answer's format. What would change the answer's meaning
// and cannot be honoured (several candidates, logprobs, other modalities)
// is refused; thinking settings are dropped.
func (d *decoded) generation(g *generationConfig) error {
	if g == nil {
		return nil
	}
	g.merge()
	out := &d.chat
	switch {
	case g.CandidateCount != nil && *g.CandidateCount != 1:
		return apierr.BadRequest("generationConfig.candidateCount: only 1 candidate is supported, got %d", *g.CandidateCount)
	case g.MaxOutputTokens != nil && *g.MaxOutputTokens < 0:
		return apierr.BadRequest("generationConfig.maxOutputTokens: must not be negative, got %d", *g.MaxOutputTokens)
	case g.Temperature != nil && (*g.Temperature < 0 || *g.Temperature > 2):
		return apierr.BadRequest("generationConfig.temperature: must be between 0 and 2, got %g", *g.Temperature)
	case g.ResponseLogprobs != nil && *g.ResponseLogprobs, g.Logprobs != nil:
		return apierr.BadRequest("generationConfig.responseLogprobs: logprobs are not supported by this gateway")
	case !jsonx.IsNull(g.SpeechConfig):
		return apierr.BadRequest("generationConfig.speechConfig: audio output is not supported by this gateway")
	case !jsonx.IsNull(g.ImageConfig):
		return apierr.BadRequest("generationConfig.imageConfig: image output is not supported by this gateway")
	}
	for _, m := range g.ResponseModalities {
		if !strings.EqualFold(m, "TEXT") {
			return apierr.BadRequest("generationConfig.responseModalities: only TEXT is supported, got %q", m)
		}
	}
	d.dropped.AddSet(dropThinkingConfig, g.ThinkingConfig)
	if g.MaxOutputTokens != nil {
		out.MaxTokens = *g.MaxOutputTokens
	}
	out.Temperature, out.TopP, out.Stop = g.Temperature, g.TopP, g.StopSequences
	if g.TopK != nil {
		k := int(*g.TopK)
		out.TopK = &k
	}
	f, err := g.format()
	out.Format = f
	return err
}

func (g *generationConfig) merge() {
	if g.StopSequences == nil {
		g.StopSequences = g.StopSequences_
	}
	g.ResponseMimeType = cmp.Or(g.ResponseMimeType, g.ResponseMimeType_)
	orRaw(&g.ResponseSchema, g.ResponseSchema_)
	orRaw(&g.ResponseJSONSchema, g.ResponseJSONSchemaOld, g.ResponseJSONSchema_)
	orRaw(&g.ThinkingConfig, g.ThinkingConfig_)
	g.CandidateCount = cmp.Or(g.CandidateCount, g.CandidateCount_)
	g.MaxOutputTokens = cmp.Or(g.MaxOutputTokens, g.MaxOutputTokens_)
	g.TopP = cmp.Or(g.TopP, g.TopP_)
	g.TopK = cmp.Or(g.TopK, g.TopK_)
}

// format reads the structured-output fields: application/json asks for a
// JSON answer, following the schema when one is given (responseSchema in
// the Gemini Schema subset, or responseJsonSchema).
func (g *generationConfig) format() (chat.Format, error) {
	schema, field := g.ResponseJSONSchema, "responseJsonSchema"
	if !jsonx.IsNull(g.ResponseSchema) {
		if !jsonx.IsNull(schema) {
			return chat.Format{}, apierr.BadRequest("generationConfig: responseSchema and responseJsonSchema are mutually exclusive")
		}
		schema, field = g.ResponseSchema, "responseSchema"
	}
	switch mime := strings.ToLower(strings.TrimSpace(g.ResponseMimeType)); mime {
	case "", "text/plain":
		if !jsonx.IsNull(schema) {
			return chat.Format{}, apierr.BadRequest("generationConfig.%s: a response schema needs responseMimeType application/json", field)
		}
		return chat.Format{}, nil
	case "application/json":
	default:
		return chat.Format{}, apierr.BadRequest("generationConfig.responseMimeType: %q is not supported; use text/plain or application/json", g.ResponseMimeType)
	}
	if jsonx.IsNull(schema) {
		return chat.Format{JSON: true}, nil
	}
	js, err := jsonSchema(schema)
	if err != nil {
		return chat.Format{}, apierr.BadRequest("generationConfig.%s: %v", field, err)
	}
	return chat.Format{JSON: true, Schema: js}, nil
}

// decodeTools returns the functions offered to the worker and the wire path
// of each. Tools Google's servers run (search, code execution, URL
// context, ...) are dropped: no worker can run them.
func decodeTools(in []wireTool, d *httpx.Dropped) ([]chat.Tool, []string, error) {
	var out []chat.Tool
	var at []string
	for i := range in {
		t := &in[i]
		if t.hosted() {
			d.Add(dropHostedTools)
		}
		decls := t.FunctionDeclarations
		if decls == nil {
			decls = t.FunctionDeclarations_
		}
		for j := range decls {
			fd := &decls[j]
			path := fmt.Sprintf("tools[%d].functionDeclarations[%d]", i, j)
			params, err := fd.schema(path)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, chat.Tool{Name: fd.Name, Description: fd.Description, Parameters: params})
			at = append(at, path)
		}
	}
	return out, at, nil
}

// hosted reports whether t names a tool that runs on Google's side.
func (t *wireTool) hosted() bool {
	for _, raw := range []json.RawMessage{t.GoogleSearch, t.GoogleSearchRetrieval, t.CodeExecution, t.URLContext,
		t.Retrieval, t.ComputerUse, t.FileSearch, t.GoogleMaps, t.EnterpriseWebSearch, t.GoogleSearch_,
		t.CodeExecution_, t.URLContext_} {
		if !jsonx.IsNull(raw) {
			return true
		}
	}
	return false
}

// schema returns the declaration's parameters as JSON Schema (nil: none).
func (fd *functionDecl) schema(path string) (json.RawMessage, error) {
	raw, field := fd.ParametersJSONSchema, "parametersJsonSchema"
	if jsonx.IsNull(raw) {
		raw = fd.ParametersJSONSchema_
	}
	if !jsonx.IsNull(fd.Parameters) {
		if !jsonx.IsNull(raw) {
			return nil, apierr.BadRequest("%s: parameters and parametersJsonSchema are mutually exclusive", path)
		}
		raw, field = fd.Parameters, "parameters"
	}
	if jsonx.IsNull(raw) {
		return nil, nil
	}
	js, err := jsonSchema(raw)
	if err != nil {
		return nil, apierr.BadRequest("%s.%s: %v", path, field, err)
	}
	return js, nil
}

// toolConfig reads functionCallingConfig. ANY forces a call (of the one
// allowed function, when it names one); NONE forbids calls; AUTO and
// VALIDATED leave it to the model. allowedFunctionNames limits the
// functions offered to the ones it names.
func (d *decoded) toolConfig(tc *wireToolConfig) error {
	if tc == nil {
		return nil
	}
	fc := cmp.Or(tc.FunctionCallingConfig, tc.FunctionCallingConfig_)
	if fc == nil {
		return nil
	}
	allowed := fc.AllowedFunctionNames
	if allowed == nil {
		allowed = fc.AllowedFunctionNames_
	}
	out := &d.chat
	switch strings.ToUpper(fc.Mode) {
	case "", "MODE_UNSPECIFIED", "AUTO", "VALIDATED":
	case "ANY":
		out.ToolChoice = chat.ToolChoice{Mode: chat.ToolRequired}
		if len(allowed) == 1 {
			out.ToolChoice = chat.ToolChoice{Mode: chat.ToolNamed, Name: allowed[0]}
		}
	case "NONE":
		out.ToolChoice = chat.ToolChoice{Mode: chat.ToolNone}
		return nil
	default:
		return apierr.BadRequest("toolConfig.functionCallingConfig.mode: must be AUTO, ANY, NONE or VALIDATED, got %q", fc.Mode)
	}
	if len(allowed) == 0 {
		return nil
	}
	return d.allowOnly(allowed)
}

// allowOnly keeps the offered functions that names lists; each name must
// be one of the request's functions.
func (d *decoded) allowOnly(names []string) error {
	out := &d.chat
	keep := make(map[string]bool, len(names))
	for i, n := range names {
		found := false
		for _, t := range out.Tools {
			found = found || t.Name == n
		}
		if !found {
			return apierr.BadRequest("toolConfig.functionCallingConfig.allowedFunctionNames[%d]: %q is not among the request's function declarations", i, n)
		}
		keep[n] = true
	}
	tools, at := out.Tools[:0], d.toolAt[:0]
	for i, t := range out.Tools {
		if keep[t.Name] {
			tools, at = append(tools, t), append(at, d.toolAt[i])
		}
	}
	out.Tools, d.toolAt = tools, at
	return nil
}
