package gemini

import "encoding/json"

// The wire types of the Gemini API's generateContent family. Fields are
// named as the JSON every SDK and Gemini CLI sends (lowerCamelCase); the
// protobuf JSON form also accepts the snake_case names, which Google's own
// curl examples use, so the fields those examples name have a second,
// snake_case field that merge folds in. Unknown fields are ignored, as on
// the other protocols.

// generateRequest is the body of models/{model}:generateContent and
// :streamGenerateContent, and countTokens' generateContentRequest.
type generateRequest struct {
	Model             string            `json:"model"`
	Contents          []wireContent     `json:"contents"`
	SystemInstruction *wireContent      `json:"systemInstruction"`
	Tools             []wireTool        `json:"tools"`
	ToolConfig        *wireToolConfig   `json:"toolConfig"`
	GenerationConfig  *generationConfig `json:"generationConfig"`
	SafetySettings    json.RawMessage   `json:"safetySettings"`
	CachedContent     string            `json:"cachedContent"`
	Labels            map[string]string `json:"labels"`

	SystemInstruction_ *wireContent      `json:"system_instruction"`
	ToolConfig_        *wireToolConfig   `json:"tool_config"`
	GenerationConfig_  *generationConfig `json:"generation_config"`
	SafetySettings_    json.RawMessage   `json:"safety_settings"`
	CachedContent_     string            `json:"cached_content"`
}

// countRequest is the body of models/{model}:countTokens: contents alone,
// or a whole generateContentRequest.
type countRequest struct {
	Contents                []wireContent    `json:"contents"`
	GenerateContentRequest  *generateRequest `json:"generateContentRequest"`
	GenerateContentRequest_ *generateRequest `json:"generate_content_request"`
}

// wireContent is one turn of the conversation (or the system instruction).
type wireContent struct {
	Role  string     `json:"role"`
	Parts []wirePart `json:"parts"`
}

// wirePart is one part of a content; which fields are set says what it is.
type wirePart struct {
	Text                 *string         `json:"text"`
	Thought              bool            `json:"thought"`
	ThoughtSignature     string          `json:"thoughtSignature"`
	FunctionCall         *functionCall   `json:"functionCall"`
	FunctionResponse     *functionResult `json:"functionResponse"`
	InlineData           json.RawMessage `json:"inlineData"`
	FileData             json.RawMessage `json:"fileData"`
	ExecutableCode       json.RawMessage `json:"executableCode"`
	CodeExecutionResult  json.RawMessage `json:"codeExecutionResult"`
	FunctionCall_        *functionCall   `json:"function_call"`
	FunctionResponse_    *functionResult `json:"function_response"`
	InlineData_          json.RawMessage `json:"inline_data"`
	FileData_            json.RawMessage `json:"file_data"`
	ThoughtSignature_    string          `json:"thought_signature"`
	ExecutableCode_      json.RawMessage `json:"executable_code"`
	CodeExecutionResult_ json.RawMessage `json:"code_execution_result"`
}

// functionCall is a call the model made (in a model content) or makes (in
// an answer).
type functionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

// functionResult is a function's answer in a user content.
type functionResult struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
	Parts    []wirePart      `json:"parts"`
}

// wireTool is one entry of tools: function declarations, or one of the
// tools Google's servers run.
type wireTool struct {
	FunctionDeclarations  []functionDecl  `json:"functionDeclarations"`
	FunctionDeclarations_ []functionDecl  `json:"function_declarations"`
	GoogleSearch          json.RawMessage `json:"googleSearch"`
	GoogleSearchRetrieval json.RawMessage `json:"googleSearchRetrieval"`
	CodeExecution         json.RawMessage `json:"codeExecution"`
	URLContext            json.RawMessage `json:"urlContext"`
	Retrieval             json.RawMessage `json:"retrieval"`
	ComputerUse           json.RawMessage `json:"computerUse"`
	FileSearch            json.RawMessage `json:"fileSearch"`
	GoogleMaps            json.RawMessage `json:"googleMaps"`
	EnterpriseWebSearch   json.RawMessage `json:"enterpriseWebSearch"`
	GoogleSearch_         json.RawMessage `json:"google_search"`
	CodeExecution_        json.RawMessage `json:"code_execution"`
	URLContext_           json.RawMessage `json:"url_context"`
}

// functionDecl declares a function: its parameters as the Gemini Schema
// subset (parameters) or as JSON Schema (parametersJsonSchema).
type functionDecl struct {
	Name                  string          `json:"name"`
	Description           string          `json:"description"`
	Parameters            json.RawMessage `json:"parameters"`
	ParametersJSONSchema  json.RawMessage `json:"parametersJsonSchema"`
	ParametersJSONSchema_ json.RawMessage `json:"parameters_json_schema"`
}

type wireToolConfig struct {
	FunctionCallingConfig  *callingConfig `json:"functionCallingConfig"`
	FunctionCallingConfig_ *callingConfig `json:"function_calling_config"`
}

type callingConfig struct {
	Mode                  string   `json:"mode"`
	AllowedFunctionNames  []string `json:"allowedFunctionNames"`
	AllowedFunctionNames_ []string `json:"allowed_function_names"`
}

// generationConfig holds the sampling and output settings.
type generationConfig struct {
	StopSequences      []string        `json:"stopSequences"`
	ResponseMimeType   string          `json:"responseMimeType"`
	ResponseSchema     json.RawMessage `json:"responseSchema"`
	ResponseJSONSchema json.RawMessage `json:"responseJsonSchema"`
	// ResponseJSONSchemaOld is the field's earlier, underscored name.
	ResponseJSONSchemaOld json.RawMessage `json:"_responseJsonSchema"`
	ResponseModalities    []string        `json:"responseModalities"`
	CandidateCount        *int            `json:"candidateCount"`
	MaxOutputTokens       *int            `json:"maxOutputTokens"`
	Temperature           *float64        `json:"temperature"`
	TopP                  *float64        `json:"topP"`
	TopK                  *float64        `json:"topK"`
	Seed                  *int64          `json:"seed"`
	PresencePenalty       *float64        `json:"presencePenalty"`
	FrequencyPenalty      *float64        `json:"frequencyPenalty"`
	ResponseLogprobs      *bool           `json:"responseLogprobs"`
	Logprobs              *int            `json:"logprobs"`
	ThinkingConfig        json.RawMessage `json:"thinkingConfig"`
	SpeechConfig          json.RawMessage `json:"speechConfig"`
	ImageConfig           json.RawMessage `json:"imageConfig"`

	StopSequences_      []string        `json:"stop_sequences"`
	ResponseMimeType_   string          `json:"response_mime_type"`
	ResponseSchema_     json.RawMessage `json:"response_schema"`
	ResponseJSONSchema_ json.RawMessage `json:"response_json_schema"`
	CandidateCount_     *int            `json:"candidate_count"`
	MaxOutputTokens_    *int            `json:"max_output_tokens"`
	TopP_               *float64        `json:"top_p"`
	TopK_               *float64        `json:"top_k"`
	ThinkingConfig_     json.RawMessage `json:"thinking_config"`
}
