#!/usr/bin/env bash
# Builds the Flex Template image and spec, then (with RUN=1) launches a job from it.
#   PROJECT=my-project REGION=us-central1 BUCKET=my-bucket dataflow_templates/build_and_run.sh
#   RUN=1 INPUT=gs://my-bucket/raw OUTPUT=gs://my-bucket/tfrecords ... (same variables)
# SERVICE_ACCOUNT=NAME@PROJECT.iam.gserviceaccount.com runs the launcher and the workers as that
# account (default: the Compute Engine default service account); docs/flex-template.md lists
# the roles each account needs. The spec carries gs://BUCKET/tmp and gs://BUCKET/staging, and
# the account, as the defaults of a launch from the console.
# PRINT=1 prints the gcloud commands, one a line, instead of running them (no gcloud needed).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${PROJECT:?set PROJECT}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET}"
REPOSITORY=${REPOSITORY:-dataflow}
IMAGE=${IMAGE:-$REGION-docker.pkg.dev/$PROJECT/$REPOSITORY/image-tfrecords:latest}
SPEC=${SPEC:-gs://$BUCKET/templates/image-tfrecords.json}
LOCATIONS=(--temp-location="gs://$BUCKET/tmp" --staging-location="gs://$BUCKET/staging")
ACCOUNT=()
if [[ -n "${SERVICE_ACCOUNT:-}" ]]; then ACCOUNT=(--service-account-email="$SERVICE_ACCOUNT"); fi

gcloud_() {   # gcloud ARGS, or the command line that would run with PRINT=1
  if [[ "${PRINT:-0}" == 1 ]]; then
    printf '%q' gcloud; printf ' %q' "$@"; printf '\n'
  else
    gcloud "$@"
  fi
}

if [[ "${RUN:-0}" != 1 ]]; then
  gcloud_ services enable dataflow.googleapis.com compute.googleapis.com logging.googleapis.com \
    storage.googleapis.com artifactregistry.googleapis.com cloudbuild.googleapis.com \
    --project="$PROJECT"   # Enabling an enabled API changes nothing.
  if [[ "${PRINT:-0}" == 1 ]] ||
     ! gcloud artifacts repositories describe "$REPOSITORY" --location="$REGION" \
       --project="$PROJECT" >/dev/null 2>&1; then   # Printed: made only where it is missing.
    gcloud_ artifacts repositories create "$REPOSITORY" --repository-format=docker \
      --location="$REGION" --project="$PROJECT"
  fi
  gcloud_ builds submit --project="$PROJECT" --region="$REGION" \
    --config=dataflow_templates/cloudbuild.yaml --substitutions=_IMAGE="$IMAGE" .
  gcloud_ dataflow flex-template build "$SPEC" --project="$PROJECT" \
    --image="$IMAGE" --sdk-language=PYTHON --metadata-file=dataflow_templates/metadata.json \
    "${LOCATIONS[@]}" ${ACCOUNT[@]+"${ACCOUNT[@]}"}
  echo "Template spec: $SPEC"
else
  : "${INPUT:?set INPUT}" "${OUTPUT:?set OUTPUT}"
  gcloud_ dataflow flex-template run "image-tfrecords-$(date +%Y%m%d-%H%M%S)" \
    --project="$PROJECT" --region="$REGION" --template-file-gcs-location="$SPEC" \
    "${LOCATIONS[@]}" ${ACCOUNT[@]+"${ACCOUNT[@]}"} --parameters=input_dir="$INPUT",output_dir="$OUTPUT"
fi
