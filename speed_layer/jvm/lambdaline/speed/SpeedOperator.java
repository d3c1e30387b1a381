package lambdaline.speed;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.types.StructType;

import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The speed layer's one stateful operator (Spark's transformWithState, event time): every view
 * the speed job computes from the input, from one shuffle of one decode.
 *
 * <p>Each input row is keyed by what it is grouped by, its key's first two characters naming
 * the part that handles it ({@link Input}): a roll-up group ({@link RollUp}: an entry's booth),
 * a plate ({@link Plates}: an entry, an exit or a registration, for the best matches and the
 * sessions) or a dead letter (passed through as it came). So an entry is two rows, one per
 * key. The parts keep their state in state variables of their own; a key touches only its
 * part's.
 *
 * <p>What each part computes comes from the view modules, serialised by the speed job ({@link
 * OperatorConfig}): this class holds no view's rule. Its output rows ({@link Output#SCHEMA}) are
 * named by {@code kind}: a view, a diagnostic or {@code dead_letter}.
 */
public final class SpeedOperator extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  private final OperatorConfig config;
  private transient RollUp rollUp;
  private transient Plates plates;
  private transient Output output;
  private transient Input.Columns columns;

  private SpeedOperator(OperatorConfig config) {
    this.config = config;
  }

  /** The operator over {@link Input} rows, with its configuration as JSON. */
  public static Dataset<Row> apply(Dataset<Row> rows, String configJson) {
    SpeedOperator operator = new SpeedOperator(OperatorConfig.parse(configJson));
    int key = rows.schema().fieldIndex(Input.KEY);
    MapFunction<Row, String> keyOf = row -> row.getString(key);
    StructType schema = new Output(operator.config.output).schema;
    return rows.groupByKey(keyOf, Encoders.STRING())
        .transformWithState(
            operator, TimeMode.EventTime(), OutputMode.Append(), Encoders.row(schema));
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    output = new Output(config.output);
    rollUp = config.rollUp == null ? null : new RollUp(config, output, getHandle());
    plates = new Plates(config, output, getHandle());
  }

  @Override
  public Iterator<Row> handleInputRows(String key, Iterator<Row> rows, TimerValues timers) {
    List<Row> out = new ArrayList<>();
    Input.Part part = Input.partOf(key);
    String group = key.substring(Input.PREFIX_LENGTH);
    switch (part) {
      case ROLL_UP -> {
        if (rollUp == null) {
          throw new IllegalArgumentException("a roll-up row, and no roll-up is configured");
        }
        rollUp.onRows(group, rows, timers, out);
      }
      case PLATE -> plates.onRows(group, rows, timers, out);
      case DEAD_LETTER -> {
        while (rows.hasNext()) {
          Row row = rows.next();
          columns = Input.Columns.of(columns, row, config.input);
          out.add(output.deadLetter(row, columns));
        }
      }
    }
    return CollectionConverters.asScala(out.iterator());
  }

  @Override
  public Iterator<Row> handleExpiredTimer(String key, TimerValues timers, ExpiredTimerInfo fired) {
    List<Row> out = new ArrayList<>();
    String group = key.substring(Input.PREFIX_LENGTH);
    switch (Input.partOf(key)) {
      case ROLL_UP -> rollUp.onTimer(group, timers, out);
      case PLATE -> plates.onTimer(group, fired.getExpiryTimeInMs(), timers, out);
      case DEAD_LETTER -> {}
    }
    return CollectionConverters.asScala(out.iterator());
  }
}
