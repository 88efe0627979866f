module capstan.dev/alertmanager-builder

go 1.26.0

require github.com/prometheus/alertmanager v0.35.0

replace github.com/prometheus/alertmanager => ../source
