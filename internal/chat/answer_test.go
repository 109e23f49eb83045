package chat

import "testing"

func TestQueue(t *testing.T) {
	var q Queue
	if _, ok := q.Pop(); ok {
		t.Fatal("Pop on an empty queue = true")
	}
	for round := range 2 { // the second round reuses the storage
		q.Push(Event{Type: EventText, Text: "a"})
		q.Push(Event{Type: EventText, Text: "b"})
		if q.Len() != 2 {
			t.Fatalf("round %d: Len = %d, want 2", round, q.Len())
		}
		for _, want := range []string{"a", "b"} {
			if ev, ok := q.Pop(); !ok || ev.Text != want {
				t.Fatalf("round %d: Pop = %+v, %v; want %q", round, ev, ok, want)
			}
		}
		if _, ok := q.Pop(); ok {
			t.Fatalf("round %d: Pop past the end = true", round)
		}
	}
}

// Next steps the source until an event is queued, and is false once the
// answer ended and everything queued was taken.
func TestQueueNext(t *testing.T) {
	var q Queue
	ended := false
	steps := 0
	script := []Event{{Type: EventText, Text: "a"}, {Type: EventDone}}
	step := func() {
		steps++
		q.Push(script[0])
		if script[0].Type == EventDone {
			ended = true
		}
		script = script[1:]
	}
	var got []EventType
	for {
		ev, ok := q.Next(&ended, step)
		if !ok {
			break
		}
		got = append(got, ev.Type)
	}
	if len(got) != 2 || got[0] != EventText || got[1] != EventDone || steps != 2 {
		t.Errorf("events = %v after %d steps, want text then done after 2", got, steps)
	}
	if _, ok := q.Next(&ended, func() { t.Fatal("stepped past the end") }); ok {
		t.Error("Next past the end = true")
	}
}
