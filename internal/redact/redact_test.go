package redact

import "testing"

func TestRedactURL(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"no secret", "nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"host:port", "127.0.0.1:6379", "127.0.0.1:6379"},
		{"empty", "", ""},
		{"user and password", "postgres://gate:pa55word@db:5432/gate", "postgres://gate:xxxxx@db:5432/gate"},
		{"password only (Redis)", "redis://:pa55word@cache:6379/0", "redis://:xxxxx@cache:6379/0"},
		{"NATS token", "nats://s3cr3ttoken@nats:4222", "nats://xxxxx@nats:4222"},
		{"NATS user and password", "nats://gate:pa55word@nats:4222", "nats://gate:xxxxx@nats:4222"},
		{"escaped password", "postgres://gate:p%40ss%2Fw0rd@db/gate", "postgres://gate:xxxxx@db/gate"},
		{"unescaped @ in the password", "postgres://gate:p@ss@db/gate", "postgres://gate:xxxxx@db/gate"},
		{"unescaped / in the password", "postgres://gate:ab/cd==@db/gate", "postgres://gate:xxxxx@db/gate"},
		{"unescaped ? in the password", "postgres://gate:ab?cd@db/gate", "postgres://gate:xxxxx@db/gate"},
		{"unescaped # in the password", "redis://:ab#cd@cache:6379", "redis://:xxxxx@cache:6379"},
		{"query password", "postgres://gate@db/gate?sslmode=disable&password=pa55word", "postgres://xxxxx@db/gate?sslmode=disable&password=xxxxx"},
		{"query password, no userinfo", "postgres://db/gate?password=pa55word&sslmode=disable", "postgres://db/gate?password=xxxxx&sslmode=disable"},
		{"query names in any case", "postgres://db/gate?PassWord=a&SSLPASSWORD=b&Access_Token=c&secret=d&token=e&user=gate",
			"postgres://db/gate?PassWord=xxxxx&SSLPASSWORD=xxxxx&Access_Token=xxxxx&secret=xxxxx&token=xxxxx&user=gate"},
		{"escaped query name", "postgres://db/gate?pass%77ord=pa55word", "postgres://db/gate?pass%77ord=xxxxx"},
		{"; between query pairs", "postgres://db/gate?sslmode=disable;password=pa55word", "postgres://db/gate?sslmode=disable;password=xxxxx"},
		{"Redis Cluster seeds", "redis://:pa55word@h1:7000?addr=h2:7001&addr=h3:7002", "redis://:xxxxx@h1:7000?addr=h2:7001&addr=h3:7002"},
		{"NATS list", "nats://tok1@h1:4222,nats://u:pw@h2:4222, nats://h3:4222",
			"nats://xxxxx@h1:4222,nats://u:xxxxx@h2:4222, nats://h3:4222"},
		{"NATS list with a comma in a password", "nats://u:a,b@h1:4222,nats://u:c,d@h2:4222", "nats://u:xxxxx@h1:4222,nats://u:xxxxx@h2:4222"},
		{"NATS list without schemes", "tok1@h1:4222,h2:4222", "xxxxx@h1:4222,h2:4222"},
		{"Nacos addresses", "nacos1:8848,nacos2:8848", "nacos1:8848,nacos2:8848"},
		{"keyword/value", "host=db user=gate password=pa55word dbname=gate", "host=db user=gate password=xxxxx dbname=gate"},
		{"keyword/value, quoted", "host=db password='pa55 w\\'ord' sslpassword = 'x y' dbname=gate",
			"host=db password=xxxxx sslpassword = xxxxx dbname=gate"},
		{"keyword/value, unterminated quote", "host=db password='pa55 word", "host=db password=xxxxx"},
		{"keyword/value, garbage after", "host=db oops pa55word", "host=db xxxxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := URL(tt.in); got != tt.want {
				t.Errorf("URL(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}
