# The cleaner image: Java 17, PySpark and seglog_spark, for three roles in docker-compose.yml:
#   the scheduler    seglog cleaner run --server seglog:50551 --master spark://spark-master:7077
#   a Spark master   spark-class org.apache.spark.deploy.master.Master
#   a Spark worker   spark-class org.apache.spark.deploy.worker.Worker spark://spark-master:7077
# The master and workers run the Spark distribution that ships inside the pinned pyspark package,
# so the driver, the executors and their Python workers share one Python and one Spark version
# (PySpark refuses a driver and workers of different Python minor versions).
#   docker build -f deploy/cleaner.Dockerfile -t seglog-cleaner .
FROM python:3.11.13-slim-bookworm

# Spark 4 runs on Java 17 or 21; Debian bookworm ships 17. procps: Spark's scripts call ps.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless=17.0.* procps=2:4.0.* \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/seglog
COPY requirements.txt pyproject.toml deploy/print_requirements.py ./
RUN python print_requirements.py requirements.txt pyproject.toml spark remote > /tmp/pins.txt \
 && pip install --no-cache-dir --disable-pip-version-check -r /tmp/pins.txt \
 && rm /tmp/pins.txt

COPY README.md ./
COPY client ./client
COPY server ./server
COPY cli ./cli
COPY spark_jobs ./spark_jobs
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps .

# Same uid as the service image, so snapshots the service makes in the shared data volume are
# readable and the cleaned segments the job writes there are the service's to install.
RUN groupadd --system --gid 10001 seglog \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/seglog --shell /usr/sbin/nologin seglog \
 && mkdir -p /var/lib/seglog /tmp/spark/work /tmp/spark/local /tmp/spark/logs \
 && chown -R seglog:seglog /var/lib/seglog /tmp/spark

# PySpark's workers must run this Python (not whatever python3 is first on PATH), and Spark
# keeps every file it writes in one place uid 10001 owns and the container can lose: SPARK_HOME
# is inside site-packages (root's), so a worker's default work folder ($SPARK_HOME/work) cannot
# be created there. Work folders of executors (SPARK_WORKER_DIR), shuffle and block scratch
# (SPARK_LOCAL_DIRS, spark.local.dir), the daemons' logs (SPARK_LOG_DIR), the cleaner driver's
# own log (SPARK_LOG_FILE) and Ivy's cache (under HOME).
ENV PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python \
    SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    SPARK_WORKER_DIR=/tmp/spark/work \
    SPARK_LOCAL_DIRS=/tmp/spark/local \
    SPARK_LOG_DIR=/tmp/spark/logs \
    SPARK_LOG_FILE=/tmp/spark/logs/cleaner-driver.log \
    HOME=/home/seglog \
    SPARK_NO_DAEMONIZE=1 \
    PYTHONUNBUFFERED=1
ENV PATH="${SPARK_HOME}/bin:${SPARK_HOME}/sbin:${PATH}"

USER 10001:10001
# Spark master RPC and UI, worker UI (compose publishes none of them by default).
EXPOSE 7077 8080 8081
CMD ["seglog", "cleaner", "run", "--help"]
