package config

import "github.com/poolgate/poolgate/internal/redisconn"

// Redis is how to reach Redis, from redis_url, redis_mode and the password
// and CA files.
func (c *Config) Redis() redisconn.Config {
	return redisconn.Config{Mode: redisconn.Mode(c.RedisMode), URL: c.RedisURL, PasswordFile: c.RedisPasswordFile,
		CAFile: c.RedisTLSCAFile}
}
