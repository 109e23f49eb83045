package qoder

import "github.com/poolgate/poolgate/pool/agentcli"

// Vocabulary is what qodercli may print on its standard output: the
// messages of its SDK's SDKMessage union (@qoder-ai/qoder-agent-sdk 1.0.39,
// dist/protocol/messages.d.ts) and of its control protocol
// (control.d.ts), beside the ones agentcli reads. A line outside it is
// logged and counted, and the tests that run the real binary fail on it.
func Vocabulary() agentcli.Vocabulary {
	return agentcli.Vocabulary{}.With([]string{
		agentcli.TypeSystem, agentcli.TypeAssistant, agentcli.TypeUser, agentcli.TypeResult,
		agentcli.TypeStreamEvent, agentcli.TypeControlRequest, agentcli.TypeControlResponse,
		agentcli.TypeControlCancel, "control_cancel", "command_lifecycle", "prompt_suggestion", "cloud_agent_event",
	}, []string{
		// Seen from the binary here: init (every turn), artifacts_update
		// (after init), hook_started and hook_response (the bundled
		// security plugin's SessionStart hook, before hooks were turned
		// off), api_retry (a model request retried).
		agentcli.SubtypeInit, "artifacts_update", "hook_started", "hook_response", agentcli.SubtypeAPIRetry,
		// The rest of the SDK's union.
		"compact_boundary", "status", "model_queue_status", "control_request_progress", "hook_progress",
		"task_notification", "task_started", "task_progress", "task_updated", "background_tasks_changed",
		"plan_mode_changed", "goal_updated", "goal_cleared", "session_state_changed", "session_title_changed",
		"files_persisted", "elicitation_complete", "memory_generation", "memory_consumption", "skill_evolution",
		"permission_denied", "available_models_update", "commands_changed",
	})
}
