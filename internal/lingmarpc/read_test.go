package lingmarpc

import (
	"bytes"
	"reflect"
	"testing"
)

var readSeeds = []string{
	`{"jsonrpc":"2.0","id":7,"method":"chat/answer","params":{"requestId":"r-1","text":"hello"}}`,
	`{"jsonrpc":"2.0","method":"chat/finish","params":{"requestId":"r-1","statusCode":200}}`,
	`{"jsonrpc":"2.0","id":"12","result":{"ok":true}}`,
	`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no such method"}}`,
	` { "jsonrpc" : "2.0" , "id" : 1 , "result" : [ 1 , 2 ] } `,
	`{"jsonrpc":"2.0","ID":4,"result":{}}`,
	`{"jsonrpc":"2.0","id":4,"id":5,"result":{}}`,
	`{"jsonrpc":"2.0","id":null,"result":{}}`,
	`{"jsonrpc":"2.0","method":"chat\/answer","params":{}}`,
	`{"jsonrpc":"2.0","method":"\xff","params":{}}`,
	`{"jsonrpc":"1.0","method":"x"}`,
	`{"method":"x"}`,
	`{"jsonrpc":"2.0","extra":{"a":[1,{"b":null}]},"method":"x"}`,
	`{"jsonrpc":"2.0","method":"x"} trailing`,
	`{"jsonrpc":"2.0","method":"x"`,
	`[]`,
	``,
}

// Read gives what Decode gives, for any body: the same error or none, and
// the same message.
func FuzzRead(f *testing.F) {
	for _, s := range readSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		want, werr := Decode(body)
		var got Message
		gerr := Read(body, &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: Read error %v, Decode error %v", body, gerr, werr)
		}
		if werr != nil {
			if gerr.Error() != werr.Error() {
				t.Fatalf("%q: Read error %q, Decode error %q", body, gerr, werr)
			}
			return
		}
		if got.JSONRPC != want.JSONRPC || got.Method != want.Method || !bytes.Equal(got.ID, want.ID) ||
			!bytes.Equal(got.Params, want.Params) || !bytes.Equal(got.Result, want.Result) || !reflect.DeepEqual(got.Error, want.Error) {
			t.Fatalf("%q: Read %+v, Decode %+v", body, got, *want)
		}
	})
}

// The common shapes are read without encoding/json, and without copies.
func TestReadInOnePass(t *testing.T) {
	for _, s := range readSeeds[:3] {
		body := []byte(s)
		var m Message
		if !readMessage(body, &m) {
			t.Errorf("%s: the one-pass reader gave up", s)
		}
	}
	body := []byte(readSeeds[0])
	var m Message // a reader's message escapes anyway: count the reading alone
	if n := testing.AllocsPerRun(100, func() {
		if err := Read(body, &m); err != nil || m.Method != "chat/answer" {
			t.Fatal(err, m)
		}
	}); n != 0 {
		t.Errorf("%v allocations reading a chat/answer, want none", n)
	}
}
