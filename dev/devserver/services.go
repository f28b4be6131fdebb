package devserver

import (
	"fmt"
	"slices"

	"go.temporal.io/server/common/primitives"
)

// allServices are the services a process runs by default.
var allServices = []string{
	string(primitives.FrontendService), string(primitives.HistoryService),
	string(primitives.MatchingService), string(primitives.WorkerService),
}

// validServices checks names against allServices; none means all.
func validServices(names []string) ([]string, error) {
	if len(names) == 0 {
		return allServices, nil
	}
	seen := map[string]bool{}
	for _, n := range names {
		if !slices.Contains(allServices, n) {
			return nil, fmt.Errorf("devserver: Services: %q is not one of %v", n, allServices)
		}
		if seen[n] {
			return nil, fmt.Errorf("devserver: Services: %q is given twice", n)
		}
		seen[n] = true
	}
	return names, nil
}

// runs says whether this process runs service svc.
func (c Config) runs(svc primitives.ServiceName) bool {
	return slices.Contains(c.Services, string(svc))
}
