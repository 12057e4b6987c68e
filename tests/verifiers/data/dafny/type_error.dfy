method Flag(x: int) returns (b: bool)
{
  b := x + 1;
}
