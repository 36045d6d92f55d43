"""The Ray experiment system: grid specs -> cells, Ray worker actors that own a model, the
streaming grid driver, the resumable Parquet result store, MLflow tracking, and the metrics
module that turns sample records into every number Ripple reports (DESIGN.md section 6)."""
