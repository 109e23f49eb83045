package lingmarpc

// The texts that classify a worker's error message. No public capture shows
// what a real worker says when its account is throttled or its login is
// gone, so the driver's patterns are operator settings
// (lingma.ratelimit_text, lingma.login_text) with these defaults: the words
// public gateways match, and the worker's own log line for missing
// credentials ("No cached user info, please login.").
const (
	DefaultRateLimitText = `(?i)rate.?limit|quota|too many requests|throttl`
	DefaultLoginText     = `(?i)not.?log(ged)?.?in|please.?log.?in|login.?required|unauthori[sz]ed|no cached user`
)
