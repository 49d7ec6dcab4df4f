#!/usr/bin/env bash
# Builds the Flex Template image and spec, then (with RUN=1) launches a job from it.
#   PROJECT=my-project REGION=us-central1 BUCKET=my-bucket dataflow_templates/build_and_run.sh
#   RUN=1 INPUT=gs://my-bucket/raw OUTPUT=gs://my-bucket/tfrecords ... (same variables)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${PROJECT:?set PROJECT}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET}"
REPOSITORY=${REPOSITORY:-dataflow}
IMAGE=${IMAGE:-$REGION-docker.pkg.dev/$PROJECT/$REPOSITORY/image-tfrecords:latest}
SPEC=${SPEC:-gs://$BUCKET/templates/image-tfrecords.json}

if [[ "${RUN:-0}" != 1 ]]; then
  gcloud artifacts repositories describe "$REPOSITORY" --location="$REGION" --project="$PROJECT" >/dev/null 2>&1 ||
    gcloud artifacts repositories create "$REPOSITORY" --repository-format=docker \
      --location="$REGION" --project="$PROJECT"
  gcloud builds submit --project="$PROJECT" --region="$REGION" \
    --config=dataflow_templates/cloudbuild.yaml --substitutions=_IMAGE="$IMAGE" .
  gcloud dataflow flex-template build "$SPEC" --project="$PROJECT" \
    --image="$IMAGE" --sdk-language=PYTHON --metadata-file=dataflow_templates/metadata.json
  echo "Template spec: $SPEC"
else
  : "${INPUT:?set INPUT}" "${OUTPUT:?set OUTPUT}"
  gcloud dataflow flex-template run "image-tfrecords-$(date +%Y%m%d-%H%M%S)" \
    --project="$PROJECT" --region="$REGION" --template-file-gcs-location="$SPEC" \
    --temp-location="gs://$BUCKET/tmp" \
    --parameters=input_dir="$INPUT",output_dir="$OUTPUT",sdk_container_image="$IMAGE"
fi
