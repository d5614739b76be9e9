package linearizability

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is one operation in a history file.
type op struct {
	Client       int
	Input        Input
	Output       Output
	Call, Return int64
}

// Save writes history as JSON to path (for a regression test).
func Save(path string, history []porcupine.Operation) error {
	ops := make([]op, len(history))
	for i, o := range history {
		ops[i] = op{o.ClientId, o.Input.(Input), o.Output.(Output), o.Call, o.Return}
	}
	b, err := json.MarshalIndent(ops, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Load reads a history written by Save.
func Load(path string) ([]porcupine.Operation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ops []op
	if err := json.Unmarshal(b, &ops); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	history := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		o.Input.Call, o.Input.Return = o.Call, o.Return
		if o.Input.WallCall == 0 && o.Input.WallReturn == 0 { // recorded before the wall clock was
			o.Input.WallCall, o.Input.WallReturn = o.Call, o.Return
		}
		history[i] = porcupine.Operation{ClientId: o.Client, Input: o.Input, Output: o.Output, Call: o.Call, Return: o.Return}
	}
	return history, nil
}

// Check checks history against model (NewModel) within timeout. When the history is
// not linearizable it writes porcupine's visualization (HTML) and the
// history (JSON, for Load) to dir and returns their paths.
func Check(model porcupine.Model, history []porcupine.Operation, timeout time.Duration, dir, name string) (porcupine.CheckResult, []string, error) {
	res, info := porcupine.CheckOperationsVerbose(model, history, timeout)
	if res != porcupine.Illegal {
		return res, nil, nil
	}
	html, js := filepath.Join(dir, name+".html"), filepath.Join(dir, name+".json")
	if err := porcupine.VisualizePath(model, info, html); err != nil {
		return res, nil, err
	}
	return res, []string{html, js}, Save(js, history)
}
